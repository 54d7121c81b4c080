"""The partner API (docs/partners.md): customer tenants a partner provisions and oversees,
and the integrations it publishes to them."""
