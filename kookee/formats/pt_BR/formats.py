# As in English (kookee/formats/en): seconds everywhere, in Brazil's order.
DATETIME_FORMAT = "d/m/Y H:i:s"
SHORT_DATETIME_FORMAT = "d/m/Y H:i:s"
