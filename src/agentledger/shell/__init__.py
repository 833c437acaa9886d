"""The shell around every service's domain core: its process lifecycle, how its endpoints
answer, and its bounded caches."""
