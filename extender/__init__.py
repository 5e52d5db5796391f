"""spotshift webhook and scheduler extender (Flask on gunicorn)."""
