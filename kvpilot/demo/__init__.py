"""`kvpilot demo`: a simulated fleet replayed through the real service (``replay``), its live terminal view
(``view``) and its one-PNG plot (``plot``)."""
