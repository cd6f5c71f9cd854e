"""The dashboard's read-side pages: jobs list filters, iteration detail, comparisons, leaderboards."""
