from django.contrib.admin.apps import AdminConfig as DjangoAdminConfig


class AdminConfig(DjangoAdminConfig):
    """django.contrib.admin, with the project's own site set up once every
    app's admin is registered: auth's admins under the lookup policy
    (kookee/admin.py)."""

    def ready(self) -> None:
        super().ready()
        from kookee import admin  # noqa: F401
