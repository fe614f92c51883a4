"""kvpilot's store: SQLAlchemy models, keyword-only repository functions and the buffered writer that keeps
the control loop deciding while the database is away."""
