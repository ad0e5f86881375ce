// Empty: this crate exists only to fetch the cyclors sources.
