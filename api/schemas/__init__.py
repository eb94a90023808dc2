"""Request and response bodies, one module per API area; units in field names and descriptions."""
