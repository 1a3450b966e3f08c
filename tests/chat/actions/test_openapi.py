"""Reading a customer's OpenAPI document into actions: what becomes a tool,
what the model sees of it, and every refusal naming its place."""

import copy
import json

import jsonschema
import pytest
import yaml

from chat.actions.openapi import MAX_BYTES, BadDocument, Document, Operation, Param, Scheme, load, parse

SHOP_YAML = """\
openapi: 3.0.3
info:
  title: Shop API
  version: "2.1"
servers:
  - url: https://{region}.shop.example/api/
    variables:
      region:
        default: eu
        enum: [eu, us]
paths:
  /orders/{order_id}:
    parameters:
      - $ref: '#/components/parameters/OrderId'
    get:
      operationId: getOrder
      summary: "  Look up an order  "
      description: Returns the order's status and items.
      parameters:
        - name: customer_id
          in: query
          required: true
          schema: {type: string}
          x-kookee-visitor: id
        - name: X-Shop-Locale
          in: header
          description: The language for item names.
          schema: {type: string, enum: [en, fr], nullable: true}
      x-kookee-fields: [/status, /items/0/name]
      responses:
        "200":
          description: The order.
          content:
            application/json:
              schema: {$ref: '#/components/schemas/Order'}
  /orders/{order_id}/cancel:
    parameters:
      - $ref: '#/components/parameters/OrderId'
    post:
      operationId: cancelOrder
      summary: Cancel an order
      security:
        - bearerAuth: []
      requestBody:
        required: true
        content:
          application/json:
            schema: {$ref: '#/components/schemas/CancelRequest'}
      responses:
        "202": {description: Cancelled.}
  /invoices:
    get:
      operationId: listInvoices
      summary: List invoices
      security:
        - invoiceKey: []
      parameters:
        - name: limit
          in: query
          schema: {type: integer, minimum: 1, maximum: 100}
      responses:
        "200": {description: The invoices.}
  /health:
    get:
      responses:
        "200": {description: OK}
components:
  parameters:
    OrderId:
      name: order_id
      in: path
      required: true
      description: The order's number, e.g. A-1001.
      schema: {type: string, pattern: '^[A-Z]-[0-9]+$'}
  schemas:
    Order:
      type: object
      properties:
        status: {type: string}
        items:
          type: array
          items: {type: object, properties: {name: {type: string}}}
    CancelRequest:
      type: object
      required: [reason]
      properties:
        reason:
          type: string
          description: Why the customer cancels.
          maxLength: 500
          example: Ordered twice
        notify:
          type: boolean
          nullable: true
  securitySchemes:
    bearerAuth: {type: http, scheme: bearer}
    invoiceKey: {type: apiKey, in: query, name: api_key}
    session: {type: apiKey, in: cookie, name: sid}
"""
SHOP_JSON = json.dumps(yaml.safe_load(SHOP_YAML), indent=2)


@pytest.fixture
def shop() -> Document:
    return parse(SHOP_YAML)


def op(document: Document, name: str) -> Operation:
    return next(operation for operation in document.operations if operation.name == name)


def spec(paths, version="3.0.3", **top):
    return {"openapi": version, "info": {"title": "T", "version": "1"}, "paths": paths, **top}


def one(operation=None, path="/things", method="get", version="3.0.3", **top) -> Operation:
    """The only operation of a document with one."""
    operation = {"operationId": "doIt", **(operation or {})}
    (result,) = parse(json.dumps(spec({path: {method: operation}}, version, **top))).operations
    return result


def refused(document) -> str:
    text = document if isinstance(document, str) else json.dumps(document)
    with pytest.raises(BadDocument) as error:
        parse(text)
    return str(error.value)


def refused_op(operation, path="/things", method="get", **top) -> str:
    return refused(spec({path: {method: {"operationId": "doIt", **operation}}}, **top))


# The shop


def test_the_shop_document(shop):
    assert (shop.title, shop.version) == ("Shop API", "2.1")
    assert [o.name for o in shop.operations] == ["getOrder", "cancelOrder", "listInvoices"]
    assert shop.skipped == ("GET /health",)
    # The unused cookie scheme is ignored, not refused.
    assert shop.schemes == (Scheme("bearerAuth", "bearer", ""), Scheme("invoiceKey", "query", "api_key"))


def test_get_order(shop):
    get = op(shop, "getOrder")
    assert (get.method, get.path, get.base_url) == ("GET", "/orders/{order_id}", "https://eu.shop.example/api")
    assert (get.summary, get.description) == ("Look up an order", "Returns the order's status and items.")
    assert [(p.name, p.location, p.required, p.visitor) for p in get.params] == [
        ("order_id", "path", True, ""),
        ("customer_id", "query", True, "id"),
        ("X-Shop-Locale", "header", False, ""),
    ]
    assert get.params[0].schema == {
        "type": "string",
        "pattern": "^[A-Z]-[0-9]+$",
        "description": "The order's number, e.g. A-1001.",
    }
    assert (get.body, get.body_required, get.security, get.confirm) == ("", False, (), False)
    assert get.fields == ("/status", "/items/0/name")
    assert get.needs_identity


def test_get_orders_tool_hides_the_identity_param(shop):
    tool = op(shop, "getOrder").tool_parameters()
    assert tool == {
        "type": "object",
        "properties": {
            "order_id": {
                "type": "string",
                "pattern": "^[A-Z]-[0-9]+$",
                "description": "The order's number, e.g. A-1001.",
            },
            "X-Shop-Locale": {
                "type": ["string", "null"],
                "enum": ["en", "fr"],
                "description": "The language for item names.",
            },
        },
        "required": ["order_id"],
        "additionalProperties": False,
    }
    assert "customer_id" not in json.dumps(tool)


def test_cancel_order(shop):
    cancel = op(shop, "cancelOrder")
    assert (cancel.method, cancel.body, cancel.body_required, cancel.confirm) == ("POST", "fields", True, True)
    assert cancel.security == (("bearerAuth",),)
    assert cancel.params[1:] == (
        Param("reason", "body", True, {"type": "string", "description": "Why the customer cancels.", "maxLength": 500}),
        Param("notify", "body", False, {"type": ["boolean", "null"]}),
    )
    assert not cancel.needs_identity
    assert cancel.tool_parameters()["required"] == ["order_id", "reason"]


def test_list_invoices(shop):
    invoices = op(shop, "listInvoices")
    assert invoices.security == (("invoiceKey",),)
    assert invoices.params == (Param("limit", "query", False, {"type": "integer", "minimum": 1, "maximum": 100}),)


def test_json_and_yaml_read_alike(shop):
    from_json = parse(SHOP_JSON)
    assert from_json == shop
    assert [o.fingerprint() for o in from_json.operations] == [o.fingerprint() for o in shop.operations]


def test_sample_arguments_validate_against_the_tool_schema(shop):
    schema = op(shop, "cancelOrder").tool_parameters()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert list(validator.iter_errors({"order_id": "A-1001", "reason": "Ordered twice", "notify": None})) == []
    errors = {error.message for error in validator.iter_errors({"order_id": "1001", "customer_id": "user-7"})}
    assert errors == {
        "'reason' is a required property",
        "'1001' does not match '^[A-Z]-[0-9]+$'",
        "Additional properties are not allowed ('customer_id' was unexpected)",
    }
    too_long = {"order_id": "A-1", "reason": "x" * 501}
    assert [error.validator for error in validator.iter_errors(too_long)] == ["maxLength"]


def test_a_tool_schema_is_a_copy(shop):
    get = op(shop, "getOrder")
    get.tool_parameters()["properties"]["order_id"]["pattern"] = "changed"
    assert get.params[0].schema["pattern"] == "^[A-Z]-[0-9]+$"


# Fingerprints


def test_fingerprints_are_stable(shop):
    assert [o.fingerprint() for o in parse(SHOP_YAML).operations] == [o.fingerprint() for o in shop.operations]
    assert len({o.fingerprint() for o in shop.operations}) == 3
    assert all(len(o.fingerprint()) == 64 for o in shop.operations)


def test_fingerprint_changes_with_the_summary_only_for_its_operation(shop):
    changed = parse(SHOP_YAML.replace("summary: Cancel an order", "summary: Cancel an order now"))
    before = {o.name: o.fingerprint() for o in shop.operations}
    after = {o.name: o.fingerprint() for o in changed.operations}
    assert after["cancelOrder"] != before["cancelOrder"]
    assert {k: v for k, v in after.items() if k != "cancelOrder"} == {
        k: v for k, v in before.items() if k != "cancelOrder"
    }


def test_fingerprint_ignores_what_the_model_never_sees(shop):
    # Responses, examples and comments are not part of an action.
    changed = parse(
        SHOP_YAML.replace("description: The order.", "description: The whole order.").replace(
            "example: Ordered twice", "example: By mistake"
        )
    )
    assert [o.fingerprint() for o in changed.operations] == [o.fingerprint() for o in shop.operations]


def test_fingerprint_follows_a_changed_schema(shop):
    changed = parse(SHOP_YAML.replace("maxLength: 500", "maxLength: 400"))
    assert op(changed, "cancelOrder").fingerprint() != op(shop, "cancelOrder").fingerprint()
    assert op(changed, "getOrder").fingerprint() == op(shop, "getOrder").fingerprint()


# Loading


def test_load_reads_a_file(tmp_path):
    path = tmp_path / "shop.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + SHOP_JSON.encode())  # a byte order mark, as some editors save
    assert load(path) == parse(SHOP_YAML)
    assert load(str(path)).title == "Shop API"


def test_load_refuses_what_it_cannot_read(tmp_path):
    with pytest.raises(BadDocument, match="cannot read"):
        load(tmp_path / "missing.yaml")
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("openapi: 3.0.0\ninfo: {title: Caf\xe9}\n".encode("latin-1"))
    with pytest.raises(BadDocument, match=r"latin\.yaml: cannot read"):
        load(latin)


def test_neither_json_nor_yaml():
    assert refused("openapi: [3.0\n  bad: {").startswith("the document is neither JSON nor YAML")


def test_json_with_an_escaped_slash():
    # PyYAML cannot read "\/", which JSON allows.
    text = json.dumps(spec({"/a": {"get": {"operationId": "a", "summary": "x"}}})).replace('"x"', '"a\\/b"')
    assert parse(text).operations[0].summary == "a/b"


def test_yaml_keeps_json_meanings():
    text = """\
openapi: 3.1.0
paths:
  /a:
    get:
      operationId: a
      parameters:
        - {name: on, in: query, schema: {type: string, enum: [yes, no], default: 2024-01-31}}
"""
    (param,) = parse(text).operations[0].params
    assert param.name == "on"
    assert param.schema == {"type": "string", "enum": ["yes", "no"], "default": "2024-01-31"}


def test_yaml_aliases_cannot_explode():
    lines = ["openapi: 3.1.0", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 12)]
    assert "too many values once YAML aliases are expanded" in refused("\n".join(lines))


# The version and the top level


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"swagger": "2.0", "paths": {}}, "swagger: Swagger 2.0 is not supported; convert to OpenAPI 3.0 or 3.1"),
        (
            {"openapi": "3.2.0", "paths": {}},
            "openapi: a version string starting with 3.0 or 3.1 is needed; '3.2.0' found",
        ),
        ({"openapi": 3.0, "paths": {}}, "openapi: a version string starting with 3.0 or 3.1 is needed; 3.0 found"),
        ({"paths": {}}, "openapi: a version string starting with 3.0 or 3.1 is needed; missing"),
        (["openapi", "3.0.0"], "the document: the top level must be a mapping"),
        ({"openapi": "3.1.0", "paths": ["/a"]}, "paths: must be a mapping"),
        ({"openapi": "3.1.0", "paths": {"a": {}}}, "paths.a: a path must start with '/'"),
        ({"openapi": "3.1.0", "paths": {"/a": []}}, "paths./a: must be a mapping"),
    ],
)
def test_refused_documents(document, message):
    assert refused(document) == message


def test_both_versions_are_read():
    assert parse(json.dumps(spec({}, "3.0.0"))).operations == ()
    assert parse(json.dumps(spec({}, "3.1.1"))).operations == ()
    assert parse("openapi: 3.1.0\n").title == ""


# Operations and their names


def test_operations_without_an_operation_id_are_skipped():
    document = parse(
        json.dumps(
            spec(
                {
                    "/health": {"get": {}, "head": {}},
                    "/a": {"get": {"operationId": "a"}, "trace": {"operationId": "t"}},
                    "x-internal": {"get": {}},
                }
            )
        )
    )
    assert [o.name for o in document.operations] == ["a"]
    assert document.skipped == ("GET /health", "HEAD /health", "TRACE /a (TRACE is not supported)")


def test_operations_in_document_order_and_method_order():
    paths = {
        "/b": {k: {"operationId": f"b_{k}"} for k in ("patch", "delete", "post", "get", "options", "put", "head")},
        "/a": {"get": {"operationId": "a_get"}},
    }
    document = parse(json.dumps(spec(paths)))
    assert [o.name for o in document.operations] == [
        "b_get", "b_put", "b_post", "b_delete", "b_options", "b_head", "b_patch", "a_get",
    ]  # fmt: skip
    assert [o.method for o in document.operations][:3] == ["GET", "PUT", "POST"]


@pytest.mark.parametrize("name", ["get order", "getOrder.v2", "", "x" * 65, "naïve", 42])
def test_operation_ids_must_be_function_names(name):
    assert refused_op({"operationId": name}) == (
        f"paths./things.get.operationId: {name!r} must be 1 to 64 letters, digits, '_' or '-'"
    )


def test_operation_id_of_64_characters():
    assert one({"operationId": "a-" + "x" * 62}).name == "a-" + "x" * 62


def test_operation_ids_must_be_unique():
    paths = {"/a": {"get": {"operationId": "same"}}, "/b": {"post": {"operationId": "same"}}}
    assert refused(spec(paths)) == "paths./b.post.operationId: 'same' is used already at paths./a.get.operationId"


@pytest.mark.parametrize("name", ["search_help_center", "request_human"])
def test_built_in_tool_names_are_reserved(name):
    assert (
        refused_op({"operationId": name}) == f"paths./things.get.operationId: {name!r} is the name of a built-in tool"
    )


def test_at_most_500_operations():
    paths = {f"/p{i}": {"get": {"operationId": f"op{i}"}} for i in range(500)}
    assert len(parse(json.dumps(spec(paths))).operations) == 500
    paths["/one-more"] = {"get": {"operationId": "more"}}
    assert refused(spec(paths)) == "paths: 501 operations; at most 500"


def test_at_most_2_mb():
    filler = "x" * (MAX_BYTES - 300)
    parse(json.dumps(spec({}, info={"title": filler})))
    # Fewer than 2 MB characters, but more than 2 MB of UTF-8.
    text = json.dumps(spec({}, info={"title": filler + "é" * 200}), ensure_ascii=False)
    assert len(text) < MAX_BYTES < len(text.encode())
    with pytest.raises(BadDocument, match=r"^the document: \d+ bytes; at most 2097152 \(2 MB\) can be imported$"):
        parse(text)


def test_summary_and_description_stripped_and_limited():
    operation = one({"summary": "  " + "s" * 1500, "description": "\n d \n"})
    assert (operation.summary, operation.description) == ("s" * 1000, "d")
    assert refused_op({"summary": ["a"]}) == "paths./things.get.summary: must be a string"


# Parameters


def test_path_item_parameters_merge_with_the_operations():
    item = {
        "parameters": [
            {"name": "id", "in": "path", "required": True, "description": "From the path item."},
            {"name": "id", "in": "query", "description": "Another place."},
            {"name": "page", "in": "query"},
        ],
        "get": {
            "operationId": "a",
            "parameters": [
                {"name": "id", "in": "path", "required": True, "description": "The operation's."},
                {"name": "page", "in": "header"},
            ],
        },
    }
    assert refused(spec({"/t/{id}": item})) == "paths./t/{id}.get.parameters: more than one parameter is named 'id'"
    del item["parameters"][1]
    assert refused(spec({"/t/{id}": item})) == "paths./t/{id}.get.parameters: more than one parameter is named 'page'"
    item["get"]["parameters"][1] = {"name": "page", "in": "query", "schema": {"type": "integer"}}
    (operation,) = parse(json.dumps(spec({"/t/{id}": item}))).operations
    assert operation.params == (
        Param("id", "path", True, {"type": "string", "description": "The operation's."}),
        Param("page", "query", False, {"type": "integer"}),
    )


def test_parameters_sorted_path_query_header():
    params = [
        {"name": "h", "in": "header"},
        {"name": "q", "in": "query"},
        {"name": "p", "in": "path", "required": True},
        {"name": "q2", "in": "query"},
    ]
    operation = one({"parameters": params}, path="/x/{p}")
    assert [(p.name, p.location) for p in operation.params] == [
        ("p", "path"), ("q", "query"), ("q2", "query"), ("h", "header"),
    ]  # fmt: skip


def test_a_parameter_without_a_name():
    params = [{"name": "id", "in": "path", "required": True}, {"in": "query"}]
    assert refused_op({"parameters": params}, path="/orders/{id}") == "paths./orders/{id}.get.parameters[1]: no name"


def test_a_referenced_parameter_is_named_at_its_component():
    components = {"parameters": {"Bad": {"name": "sid", "in": "cookie"}}}
    message = refused_op({"parameters": [{"$ref": "#/components/parameters/Bad"}]}, components=components)
    assert message == "components.parameters.Bad: cookie parameters such as 'sid' are not supported"


def test_cookie_parameters_are_refused():
    message = refused_op({"parameters": [{"name": "q", "in": "query"}, {"name": "sid", "in": "cookie"}]})
    assert message == "paths./things.get.parameters[1]: cookie parameters such as 'sid' are not supported"


def test_unknown_parameter_places_are_refused():
    message = refused_op({"parameters": [{"name": "q", "in": "body"}]})
    assert message == "paths./things.get.parameters[0]: 'q' is 'in' 'body'; path, query or header is needed"


def test_every_path_template_name_needs_a_path_parameter():
    message = refused_op({"parameters": [{"name": "order_id", "in": "query"}]}, path="/orders/{order_id}")
    assert message == "paths./orders/{order_id}.get: the path parameter 'order_id' is not defined"
    message = refused_op({"parameters": [{"name": "id", "in": "path"}]}, path="/orders")
    assert message == "paths./orders.get: the path parameter 'id' is not in the path"


def test_path_parameters_are_required():
    operation = one({"parameters": [{"name": "id", "in": "path", "required": False}]}, path="/o/{id}")
    assert operation.params[0].required
    assert operation.tool_parameters()["required"] == ["id"]


def test_headers_openapi_ignores():
    params = [{"name": name, "in": "header"} for name in ("Authorization", "accept", "Content-Type", "X-Trace")]
    assert [p.name for p in one({"parameters": params}).params] == ["X-Trace"]


def test_parameter_schemas():
    params = [
        {"name": "plain", "in": "query"},
        {"name": "filter", "in": "query", "content": {"application/json": {"schema": {"type": "object"}}}},
        {"name": "raw", "in": "query", "content": {"text/plain": {}}},
    ]
    assert [p.schema for p in one({"parameters": params}).params] == [
        {"type": "string"},
        {"type": "object"},
        {"type": "string"},
    ]
    message = refused_op({"parameters": [{"name": "f", "in": "query", "content": {}}]})
    assert message == "paths./things.get.parameters[0].content: no media type"


def test_a_parameter_description_wins_over_its_schemas():
    param = {"name": "q", "in": "query", "description": " Words ", "schema": {"type": "string", "description": "S"}}
    assert one({"parameters": [param]}).params[0].schema == {"type": "string", "description": "Words"}


# $ref


def test_json_pointer_escapes_in_refs():
    components = {"schemas": {"a/b~c": {"type": "integer"}, "with space": {"type": "boolean"}}}
    params = [
        {"name": "n", "in": "query", "schema": {"$ref": "#/components/schemas/a~1b~0c"}},
        {"name": "b", "in": "query", "schema": {"$ref": "#/components/schemas/with%20space"}},
    ]
    assert [p.schema for p in one({"parameters": params}, components=components).params] == [
        {"type": "integer"},
        {"type": "boolean"},
    ]


@pytest.mark.parametrize("ref", ["other.yaml#/components/schemas/A", "https://example.com/s.json", "#A"])
def test_remote_refs_are_refused(ref):
    message = refused_op({"parameters": [{"name": "q", "in": "query", "schema": {"$ref": ref}}]})
    assert message == (
        f"paths./things.get.parameters[0].schema: $ref {ref!r} is not supported; "
        "only refs within the document (#/...) are"
    )


def test_a_ref_to_nothing():
    message = refused_op({"parameters": [{"$ref": "#/components/parameters/Gone"}]})
    assert message == "paths./things.get.parameters[0]: $ref '#/components/parameters/Gone' points to nothing"


def test_recursive_schemas_are_refused():
    node = {
        "type": "object",
        "properties": {"children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}}},
    }
    body = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Node"}}}}
    message = refused_op({"requestBody": body}, method="post", components={"schemas": {"Node": node}})
    assert message == "components.schemas.Node.properties.children.items: recursive schema at #/components/schemas/Node"


def test_a_schema_used_twice_is_not_recursion():
    components = {"schemas": {"Money": {"type": "number"}}}
    schema = {
        "type": "object",
        "properties": {"a": {"$ref": "#/components/schemas/Money"}, "b": {"$ref": "#/components/schemas/Money"}},
    }
    operation = one({"parameters": [{"name": "q", "in": "query", "schema": schema}]}, components=components)
    assert operation.params[0].schema["properties"] == {"a": {"type": "number"}, "b": {"type": "number"}}


def test_refs_nest_at_most_32_deep():
    def chain(length):
        schemas = {f"S{i}": {"$ref": f"#/components/schemas/S{i + 1}"} for i in range(length)}
        schemas[f"S{length}"] = {"type": "string"}
        return {"schemas": schemas}

    param = {"name": "q", "in": "query", "schema": {"$ref": "#/components/schemas/S0"}}
    assert one({"parameters": [param]}, components=chain(31)).params[0].schema == {"type": "string"}
    assert (
        refused_op({"parameters": [param]}, components=chain(32))
        == "components.schemas.S31: $refs nested deeper than 32"
    )


def test_circular_refs_between_non_schemas():
    components = {
        "parameters": {"A": {"$ref": "#/components/parameters/B"}, "B": {"$ref": "#/components/parameters/A"}}
    }
    message = refused_op({"parameters": [{"$ref": "#/components/parameters/A"}]}, components=components)
    assert message == "components.parameters.B: $ref '#/components/parameters/A' loops"


def test_refs_expanding_too_far_are_refused():
    # Each schema holds the next one twice: 2**25 copies once expanded.
    schemas = {
        f"S{i}": {"type": "array", "prefixItems": [{"$ref": f"#/components/schemas/S{i + 1}"}] * 2} for i in range(25)
    }
    schemas["S25"] = {"type": "string"}
    param = {"name": "q", "in": "query", "schema": {"$ref": "#/components/schemas/S0"}}
    assert "the schemas are too large once their $refs are expanded" in refused_op(
        {"parameters": [param]}, version="3.1.0", components={"schemas": schemas}
    )


def test_a_path_item_by_ref():
    document = spec({"/a": {"$ref": "#/components/pathItems/A"}}, "3.1.0")
    document["components"] = {"pathItems": {"A": {"get": {"operationId": "a", "x-kookee-fields": "status"}}}}
    assert (
        refused(document)
        == "components.pathItems.A.get.x-kookee-fields: must be a list of JSON pointers such as '/status'"
    )


# Request bodies


def body(schema, required=True, media_type="application/json", **extra):
    return {"requestBody": {"required": required, "content": {media_type: {"schema": schema}}, **extra}}


ORDER = {"type": "object", "required": ["sku"], "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}}


def test_an_object_body_is_flattened():
    operation = one(body(ORDER), method="post")
    assert (operation.body, operation.body_required) == ("fields", True)
    assert operation.params == (
        Param("sku", "body", True, {"type": "string"}),
        Param("qty", "body", False, {"type": "integer"}),
    )


def test_an_optional_body_requires_none_of_its_fields():
    operation = one(body(ORDER, required=False), method="post")
    assert (operation.body, operation.body_required) == ("fields", False)
    assert [p.required for p in operation.params] == [False, False]


def test_a_body_colliding_with_a_parameter_is_sent_whole():
    operation = one(
        {**body(ORDER, description="The order."), "parameters": [{"name": "sku", "in": "query"}]}, method="put"
    )
    assert operation.body == "whole"
    assert operation.params[1] == Param("body", "body", True, {**ORDER, "description": "The order."})
    assert set(operation.tool_parameters()["properties"]) == {"sku", "body"}


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": {"type": "string"}},
        {"allOf": [ORDER]},
        {**ORDER, "additionalProperties": {"type": "string"}},
        {"type": "object"},
        {**ORDER, "nullable": True},
    ],
)
def test_bodies_that_cannot_be_flattened_are_sent_whole(schema):
    operation = one(body(schema), method="post")
    assert operation.body == "whole"
    assert [(p.name, p.location, p.required) for p in operation.params] == [("body", "body", True)]


def test_a_parameter_named_body_with_a_whole_body():
    message = refused_op({**body({"type": "array"}), "parameters": [{"name": "body", "in": "query"}]}, method="post")
    assert message == (
        "paths./things.post.requestBody.content.application/json.schema: "
        "the body is sent as the argument 'body', a parameter's name already"
    )


def test_json_media_types():
    assert one(body(ORDER, media_type="application/merge-patch+json"), method="patch").body == "fields"
    assert one(body(ORDER, media_type="application/json; charset=utf-8"), method="patch").body == "fields"
    both = {"requestBody": {"content": {"text/plain": {}, "application/vnd.api+json": {"schema": {"type": "array"}}}}}
    assert one(both, method="post").params[0].schema == {"type": "array"}


def test_a_body_without_json_skips_the_operation():
    paths = {
        "/upload": {"post": {"operationId": "upload", "requestBody": {"content": {"multipart/form-data": {}}}}},
        "/note": {"put": {"operationId": "n", "requestBody": {"content": {"text/plain": {}, "application/xml": {}}}}},
        "/empty": {"post": {"operationId": "empty", "requestBody": {"content": {}}}},
    }
    document = parse(json.dumps(spec(paths)))
    assert [o.name for o in document.operations] == ["empty"]
    assert document.operations[0].body == ""
    assert document.skipped == (
        "POST /upload (multipart/form-data body)",
        "PUT /note (text/plain, application/xml body)",
    )


def test_a_skipped_operation_need_not_follow_tool_name_rules():
    paths = {"/upload": {"post": {"operationId": "files.upload", "requestBody": {"content": {"image/png": {}}}}}}
    assert parse(json.dumps(spec(paths))).skipped == ("POST /upload (image/png body)",)


def test_a_body_by_ref():
    components = {"requestBodies": {"Order": body(ORDER)["requestBody"]}, "schemas": {}}
    operation = one({"requestBody": {"$ref": "#/components/requestBodies/Order"}}, method="post", components=components)
    assert [p.name for p in operation.params] == ["sku", "qty"]


# The visitor's identity


def test_identity_from_a_body_field():
    schema = {
        "type": "object",
        "properties": {
            "email": {"type": "string", "format": "email", "x-kookee-visitor": "email"},
            "plan": {"type": "string", "x-kookee-visitor": "attributes.plan_id"},
            "note": {"type": "string"},
        },
        "required": ["email", "note"],
    }
    operation = one(body(schema), method="post")
    assert [(p.name, p.visitor) for p in operation.params] == [
        ("email", "email"),
        ("plan", "attributes.plan_id"),
        ("note", ""),
    ]
    assert operation.params[0].schema == {"type": "string", "format": "email"}
    assert operation.needs_identity
    tool = operation.tool_parameters()
    assert tool["properties"] == {"note": {"type": "string"}}
    assert tool["required"] == ["note"]
    text = json.dumps(tool)
    assert "email" not in text and "plan" not in text and "kookee" not in text


@pytest.mark.parametrize("value", ["id", "email", "name", "attributes.tier", "attributes.a.b-c_9"])
def test_visitor_fields(value):
    operation = one({"parameters": [{"name": "who", "in": "query", "x-kookee-visitor": value}]})
    assert operation.params[0].visitor == value
    assert operation.tool_parameters()["properties"] == {}


@pytest.mark.parametrize(
    "value", ["phone", "attributes.", "attributes.a b", "Attributes.x", "attributes." + "k" * 65, True]
)
def test_unknown_visitor_fields_are_refused(value):
    message = refused_op({"parameters": [{"name": "who", "in": "query", "x-kookee-visitor": value}]})
    assert message == (
        f"paths./things.get.parameters[0].x-kookee-visitor: {value!r} is not one of id, email, name or attributes.KEY"
    )


def test_a_bad_visitor_on_a_body_field():
    schema = {"type": "object", "properties": {"who": {"type": "string", "x-kookee-visitor": "ssn"}}}
    message = refused_op(body(schema), method="post")
    assert message == (
        "paths./things.post.requestBody.content.application/json.schema.properties.who.x-kookee-visitor: "
        "'ssn' is not one of id, email, name or attributes.KEY"
    )


def test_identity_where_it_cannot_be_filled_is_refused():
    # In a body sent whole, or deeper than a top-level property, the model
    # would be the one to choose the value: refused, never silently exposed.
    schema = {"type": "object", "properties": {"customer": {"type": "string", "x-kookee-visitor": "id"}}}
    message = refused_op({**body(schema), "parameters": [{"name": "customer", "in": "query"}]}, method="post")
    assert message == (
        "paths./things.post.requestBody.content.application/json.schema.properties.customer: "
        "x-kookee-visitor is read only on a parameter or a property of a flattened request body"
    )
    nested = {
        "type": "object",
        "properties": {"who": {"type": "object", "properties": {"id": schema["properties"]["customer"]}}},
    }
    assert "properties.who.properties.id: x-kookee-visitor is read only" in refused_op(body(nested), method="post")


# Schema conversion


def test_openapi_30_schemas_become_json_schema():
    schema = {
        "type": "object",
        "description": "A coupon.",
        "discriminator": {"propertyName": "kind"},
        "externalDocs": {"url": "https://example.com"},
        "xml": {"name": "coupon"},
        "example": {"code": "X"},
        "x-internal": True,
        "properties": {
            "code": {"type": "string", "nullable": True, "readOnly": True},
            "example": {"type": "string", "nullable": False},
            "kind": {"type": "string", "enum": ["a", "b"], "nullable": True},
            "ref": {"$ref": "#/components/schemas/Ref", "description": "ignored in 3.0"},
            "untyped": {"nullable": True},
            "percent": {
                "type": "number",
                "minimum": 0,
                "exclusiveMinimum": True,
                "maximum": 1,
                "exclusiveMaximum": False,
            },
        },
    }
    components = {"schemas": {"Ref": {"type": "integer"}}}
    converted = one({"parameters": [{"name": "c", "in": "query", "schema": schema}]}, components=components).params[0]
    assert converted.schema == {
        "type": "object",
        "description": "A coupon.",
        "properties": {
            "code": {"type": ["string", "null"], "readOnly": True},
            "example": {"type": "string"},
            "kind": {"type": ["string", "null"], "enum": ["a", "b"]},
            "ref": {"type": "integer"},
            "untyped": {},
            "percent": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        },
    }
    jsonschema.Draft202012Validator.check_schema(converted.schema)
    validator = jsonschema.Draft202012Validator(converted.schema)
    assert list(validator.iter_errors({"code": None, "percent": 0.5})) == []
    assert [e.validator for e in validator.iter_errors({"percent": 0})] == ["exclusiveMinimum"]


def test_openapi_31_schemas_are_json_schema_already():
    schema = {
        "type": ["string", "null"],
        "nullable": True,
        "examples": ["a"],
        "example": "a",
        "x-note": "dropped",
        "$comment": "kept",
    }
    components = {"schemas": {"Ref": {"type": "integer", "description": "Count."}}}
    params = [
        {"name": "s", "in": "query", "schema": schema},
        {"name": "r", "in": "query", "schema": {"$ref": "#/components/schemas/Ref", "description": "Items."}},
        {"name": "m", "in": "query", "schema": {"$ref": "#/components/schemas/Ref", "minimum": 1}},
        {"name": "t", "in": "query", "schema": True},
    ]
    operation = one({"parameters": params}, version="3.1.0", components=components)
    assert [p.schema for p in operation.params] == [
        {"type": ["string", "null"], "nullable": True, "examples": ["a"], "$comment": "kept"},
        {"type": "integer", "description": "Items."},
        {"allOf": [{"type": "integer", "description": "Count."}], "minimum": 1},
        {},
    ]


# Security


def test_security_schemes_and_requirements():
    schemes = {
        "basic": {"type": "http", "scheme": "Basic"},
        "key": {"type": "apiKey", "in": "header", "name": "X-Api-Key"},
        "oauth": {"type": "oauth2", "flows": {}},
    }
    paths = {
        "/a": {"get": {"operationId": "inherits"}},
        "/b": {"get": {"operationId": "anonymous", "security": []}},
        "/c": {"get": {"operationId": "either", "security": [{"basic": [], "key": []}, {}]}},
    }
    document = parse(json.dumps(spec(paths, security=[{"key": []}], components={"securitySchemes": schemes})))
    assert document.schemes == (Scheme("basic", "basic", ""), Scheme("key", "header", "X-Api-Key"))
    assert [o.security for o in document.operations] == [(("key",),), (), (("basic", "key"), ())]


@pytest.mark.parametrize(
    ("scheme", "found"),
    [
        ({"type": "apiKey", "in": "cookie", "name": "sid"}, "apiKey in cookie"),
        ({"type": "oauth2", "flows": {}}, "type oauth2"),
        ({"type": "openIdConnect", "openIdConnectUrl": "https://x"}, "type openIdConnect"),
        ({"type": "mutualTLS"}, "type mutualTLS"),
        ({"type": "http", "scheme": "digest"}, "http digest"),
        ({"type": "apiKey", "in": "header"}, "apiKey in header"),
    ],
)
def test_unsupported_schemes_are_refused_where_used(scheme, found):
    components = {"securitySchemes": {"login": scheme}}
    assert parse(json.dumps(spec({"/a": {"get": {"operationId": "a"}}}, components=components))).schemes == ()
    message = refused_op({"security": [{"login": []}]}, components=components)
    assert message == (
        f"components.securitySchemes.login: {found} is not supported "
        "(only http bearer/basic, apiKey in header/query); used at paths./things.get.security[0]"
    )


def test_an_undefined_scheme_is_refused():
    message = refused_op({"security": [{"bearer": []}]})
    assert message == "paths./things.get.security[0]: scheme 'bearer' is not in components.securitySchemes"
    message = refused(spec({"/a": {"get": {"operationId": "a"}}}, security=[{}, {"nope": []}]))
    assert message == "security[1]: scheme 'nope' is not in components.securitySchemes"


# The response's fields, confirmation, servers


def test_response_fields():
    assert one({"x-kookee-fields": ["/a", "/b/0/c", "/"]}).fields == ("/a", "/b/0/c", "/")
    assert one({}).fields == ()


@pytest.mark.parametrize("fields", ["/status", ["status"], [1], {"/a": 1}])
def test_bad_response_fields(fields):
    message = refused_op({"x-kookee-fields": fields})
    assert message == "paths./things.get.x-kookee-fields: must be a list of JSON pointers such as '/status'"


@pytest.mark.parametrize(
    ("method", "opt_in", "confirm"),
    [
        ("get", None, False),
        ("head", None, False),
        ("get", True, True),
        ("head", True, True),
        ("post", None, True),
        ("delete", False, True),
        ("put", None, True),
        ("patch", None, True),
        ("options", None, True),
    ],
)
def test_confirmation(method, opt_in, confirm):
    extra = {} if opt_in is None else {"x-kookee-confirm": opt_in}
    assert one(extra, method=method).confirm is confirm


def test_bad_confirmation():
    assert refused_op({"x-kookee-confirm": "yes"}) == "paths./things.get.x-kookee-confirm: must be true or false"


def test_servers():
    paths = {
        "/a": {"get": {"operationId": "a"}},
        "/b": {
            "servers": [{"url": "https://b.example/v{v}", "variables": {"v": {"default": 2}}}],
            "get": {"operationId": "b"},
            "post": {"operationId": "c", "servers": [{"url": "/relative/"}, {"url": "https://ignored"}]},
        },
    }
    document = parse(json.dumps(spec(paths, servers=[{"url": "/api"}])))
    assert [o.base_url for o in document.operations] == ["/api", "https://b.example/v2", "/relative"]
    assert one({}).base_url == ""
    assert one({"servers": [{"url": "/"}]}).base_url == "/"


def test_a_server_variable_without_a_default():
    message = refused_op({"servers": [{"url": "https://{tenant}.example", "variables": {"tenant": {"enum": ["a"]}}}]})
    assert message == "paths./things.get.servers[0]: 'tenant' has no default"
    assert refused_op({}, servers=[{"description": "no url"}]) == "servers[0]: must be a server with a url"


def test_operations_are_frozen(shop):
    with pytest.raises(AttributeError):
        shop.operations[0].name = "other"  # type: ignore[misc]
    assert copy.deepcopy(shop) == shop
