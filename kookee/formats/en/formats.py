# Staff compare times to the second (a turn's start, a rating, a request for
# a person): every date and time the admin shows carries its seconds.
DATETIME_FORMAT = "Y-m-d H:i:s"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s"
# Dates alone, as the admin shows them beside those times.
SHORT_DATE_FORMAT = "Y-m-d"
YEAR_MONTH_FORMAT = "F Y"
