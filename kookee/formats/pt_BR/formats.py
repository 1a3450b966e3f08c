# As in English (kookee/formats/en): seconds everywhere, in Brazil's order.
DATETIME_FORMAT = "d/m/Y H:i:s"
SHORT_DATETIME_FORMAT = "d/m/Y H:i:s"
SHORT_DATE_FORMAT = "d/m/Y"
# "Dezembro de 2026", as Portuguese writes a month.
YEAR_MONTH_FORMAT = r"F \d\e Y"
