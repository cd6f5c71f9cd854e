"""Downloads: winning kernels as an installable Python package (one builder for API and pages)."""
