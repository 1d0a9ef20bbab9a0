"""Tools for developing and trying Cohort, not for production: the embedded Tansu broker, sample topics and
producers, and the `make ui` launcher. Nothing in the library imports them."""
