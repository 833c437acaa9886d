"""The shell around every service's domain core: the one service shape (``service``: a service
declares what it is, the shell connects, serves and stops it), what it holds (``parts``), how its
endpoints answer (``endpoints``), its process lifecycle (``lifecycle``) and its bounded caches
(``bounded``)."""
