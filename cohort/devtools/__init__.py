"""Tools for developing and trying Cohort, not for production: the embedded Tansu broker, sample topics and
producers, and the `make ui` launcher. Nothing in the library imports them."""

from typing import TYPE_CHECKING

from cohort.common.lazy import lazy_exports

if TYPE_CHECKING:
    from cohort.devtools.embedded_broker import EmbeddedBroker
    from cohort.devtools.topics import create_topic, produce

__all__ = ["EmbeddedBroker", "create_topic", "produce"]

__getattr__ = lazy_exports(
    __name__,
    {
        "EmbeddedBroker": "cohort.devtools.embedded_broker",
        "create_topic": "cohort.devtools.topics",
        "produce": "cohort.devtools.topics",
    },
)
