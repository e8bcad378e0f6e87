"""JSON Schema before a grammar is built: the keyword table, validity and refusals, normalisation, lint.

``keywords`` is the one table of sub-schema keywords and the one local ``$ref`` resolver; ``check``
decides validity and names every feature tagjit cannot enforce; ``normalize`` rewrites a checked schema
into forms xgrammar enforces exactly; ``metaschema`` is a fast validity check; ``lint`` finds property
orders that hurt generation.
"""

from tagjit.schema.check import (MAX_DEPTH, MAX_ENUM_VALUES, SUPPORTED_FORMATS, has_lone_surrogate, parse_schema, prepare_schema,
                                 prepared)
from tagjit.schema.normalize import normalize_schema

__all__ = ["MAX_DEPTH", "MAX_ENUM_VALUES", "SUPPORTED_FORMATS", "has_lone_surrogate", "parse_schema", "prepare_schema", "prepared",
           "normalize_schema"]
