"""Tools the end-to-end tests call, and the tiny model's end-of-sequence token id for logit_bias."""

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16},
                                                    "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                   "required": ["city", "days"]}}}
CLOCK = {"type": "function", "function": {
    "name": "get_time", "description": "Time in a timezone",
    "parameters": {"type": "object", "properties": {"tz": {"enum": ["UTC", "CET", "PST"]}}, "required": ["tz"]}}}
TOOLS = {"get_weather": WEATHER, "get_time": CLOCK}
EOS = "2"  # </s>: favoured so a random model stops once the grammar lets it
