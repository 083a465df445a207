"""mailout: reliable transactional email."""
