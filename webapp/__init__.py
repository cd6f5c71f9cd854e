"""webapp/: who asked and what they see (Django + Channels). Never imports agents/ or harness/."""
