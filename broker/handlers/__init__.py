"""Request handlers: one module per area, each a plain function of (context, request)."""
