"""Billing: Checkout and billing-portal sessions at Stripe, and the Stripe webhook that
keeps a tenant's plan in step with its subscription (docs/billing.md)."""
