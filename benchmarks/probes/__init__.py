"""One-off measurements that explain benchmark results (kept so a number can be re-made)."""
