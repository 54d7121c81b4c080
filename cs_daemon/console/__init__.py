"""The console's sign-in: emailed one-time links and browser sessions (docs/console.md)."""
