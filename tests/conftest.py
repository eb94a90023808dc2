"""Suite-wide test settings."""
