"""The journal's schema, as ordered named migrations for both backends."""
