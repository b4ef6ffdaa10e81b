"""labels stage."""
