"""The partner API (decisions §14): customer tenants a partner provisions and oversees,
and the integrations it publishes to them."""
