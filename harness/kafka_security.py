"""A secured Apache Kafka broker for tests: TLS certificates and a SASL_SSL listener with SCRAM-SHA-512.

Builds on `harness.kafka_broker.KafkaBroker` (its `extra_listeners` and `properties`): the node keeps its PLAINTEXT
listener on loopback (inter-broker, controller, and the admin requests of the tests), and gets one more listener,
`SASL_SSL`, whose certificate a throwaway CA made here signed for 127.0.0.1 and localhost. The broker reads its
key and certificate chain as a PEM keystore (`ssl.keystore.type=PEM`, one file: the unencrypted PKCS#8 key, then
the chain). The SCRAM user is created with Kafka's own `kafka-configs` (`org.apache.kafka.tools.ConfigCommand`)
against the PLAINTEXT listener, since `KafkaBroker` formats the storage itself (no `--add-scram`).

The certificates are made with the `cryptography` package (in the venv through the dev extra's Airflow).

Example:
    >>> with SecuredKafka(folder) as kafka:  # doctest: +SKIP
    ...     config = kafka.client_config()  # SASL_SSL, SCRAM-SHA-512, the CA to trust
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import secrets
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from harness.kafka_broker import KafkaBroker, KafkaBrokerError, run_kafka_tool

__all__ = [
    "LISTENER",
    "MECHANISM",
    "CertificateAuthority",
    "SecuredKafka",
    "create_scram_user",
]

LISTENER = "SASL_SSL"
"""The secured listener's name (and security protocol)."""

MECHANISM = "SCRAM-SHA-512"
HOSTS = ("127.0.0.1", "localhost")
_VALIDITY = dt.timedelta(days=2)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Cohort tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@dataclass(frozen=True)
class CertificateAuthority:
    """A self-signed CA (P-256) that issues server certificates; `write_pem` saves what clients trust."""

    name: str
    key: ec.EllipticCurvePrivateKey = field(repr=False)
    certificate: x509.Certificate = field(repr=False)

    @classmethod
    def create(cls, name: str = "Cohort test CA") -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(name, key, certificate)

    @property
    def pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def write_pem(self, path: Path) -> Path:
        """The CA certificate (PEM) at `path`: a client's `ssl.ca.location`."""
        path.write_bytes(self.pem)
        return path

    def issue_server(self, hosts: Sequence[str] = HOSTS) -> tuple[bytes, bytes]:
        """A server key and certificate for `hosts` (IP addresses and DNS names in the SAN): (PKCS#8 key PEM,
        certificate chain PEM: the leaf, then this CA)."""
        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        now = dt.datetime.now(dt.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(hosts[0]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        return _pem_key(key), certificate.public_bytes(serialization.Encoding.PEM) + self.pem


def create_scram_user(
    bootstrap_servers: str, username: str, password: str, *, mechanism: str = MECHANISM, timeout_s: float = 120.0
) -> None:
    """Create (or update) a SCRAM user with Kafka's `kafka-configs --alter --add-config` through an unsecured
    listener; a KafkaBrokerError naming the user (never the password) if the tool fails."""
    if any(c in password for c in ",=[]"):
        raise ValueError("a SCRAM password given to kafka-configs may not contain , = [ or ]")
    done = run_kafka_tool(
        "org.apache.kafka.tools.ConfigCommand",
        [
            "--bootstrap-server",
            bootstrap_servers,
            "--alter",
            "--add-config",
            f"{mechanism}=[iterations=4096,password={password}]",
            "--entity-type",
            "users",
            "--entity-name",
            username,
        ],
        timeout_s=timeout_s,
    )
    if done.returncode != 0:
        output = (done.stdout + done.stderr).replace(password, "***")
        raise KafkaBrokerError(
            f"kafka-configs could not create SCRAM user {username!r} (exit {done.returncode}):\n{output}"
        )


@dataclass
class SecuredKafka:
    """One Kafka node with a SASL_SSL (SCRAM-SHA-512) listener beside its PLAINTEXT one, its CA and its user.

    `folder` receives the CA (`ca.pem`, what clients trust) and the broker's PEM keystore (`broker-keystore.pem`);
    a fresh temporary folder, removed on stop, by default. `password` is the SCRAM user's (random by default).
    """

    folder: Path | None = None
    username: str = "cohort"
    password: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)
    ready_timeout_s: float = 60.0
    broker: KafkaBroker | None = field(default=None, init=False)
    ca: CertificateAuthority = field(default_factory=CertificateAuthority.create, init=False, repr=False)
    _owned_folder: bool = field(default=False, init=False, repr=False)

    @property
    def ca_location(self) -> Path:
        assert self.folder is not None
        return self.folder / "ca.pem"

    @property
    def bootstrap_servers(self) -> str:
        """The SASL_SSL listener."""
        if self.broker is None:
            raise KafkaBrokerError("the secured broker has not been started")
        return f"127.0.0.1:{self.broker.listener_ports[LISTENER]}"

    @property
    def plaintext_bootstrap_servers(self) -> str:
        """The unsecured loopback listener (admin requests of the tests, Kafka's tools)."""
        if self.broker is None:
            raise KafkaBrokerError("the secured broker has not been started")
        return self.broker.bootstrap_servers

    def client_config(self, *, password: str | None = None, ca_location: str | Path | None = None) -> dict[str, Any]:
        """librdkafka settings for the SASL_SSL listener (this user; another password or CA when given)."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": MECHANISM,
            "sasl.username": self.username,
            "sasl.password": self.password if password is None else password,
            "ssl.ca.location": str(self.ca_location if ca_location is None else ca_location),
        }

    def broker_properties(self, keystore: Path) -> dict[str, str]:
        """The listener's overrides: SCRAM-SHA-512 over TLS with the PEM keystore; PLAINTEXT stays as it is."""
        prefix = f"listener.name.{LISTENER.lower()}"
        return {
            "sasl.enabled.mechanisms": MECHANISM,
            f"{prefix}.sasl.enabled.mechanisms": MECHANISM,
            f"{prefix}.{MECHANISM.lower()}.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            f"{prefix}.ssl.keystore.type": "PEM",
            f"{prefix}.ssl.keystore.location": str(keystore),
            f"{prefix}.ssl.client.auth": "none",
        }

    def start(self) -> SecuredKafka:
        """Make the certificates, start the node, create the SCRAM user, and return once a SASL_SSL client with
        the user's password reads metadata through the listener."""
        if self.broker is not None and self.broker.running:
            return self
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="cohort-kafka-sasl-"))
            self._owned_folder = True
        self.folder.mkdir(parents=True, exist_ok=True)
        self.ca.write_pem(self.ca_location)
        key, chain = self.ca.issue_server(HOSTS)
        keystore = self.folder / "broker-keystore.pem"
        keystore.write_bytes(key + chain)
        keystore.chmod(0o600)
        self.broker = KafkaBroker(extra_listeners={LISTENER: "SASL_SSL"}, properties=self.broker_properties(keystore))
        self.broker.start()
        try:
            create_scram_user(self.plaintext_bootstrap_servers, self.username, self.password)
            self._await_login()
        except BaseException:
            self.stop(keep_log_dir=True)
            raise
        return self

    def _await_login(self) -> None:
        """Poll until the user's credentials (propagated through the metadata log) let a client in."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self.ready_timeout_s
        last = ""
        while time.monotonic() < deadline:
            admin = AdminClient({**self.client_config(), "log_level": 0, "socket.connection.setup.timeout.ms": 5000})
            try:
                admin.list_topics(timeout=5.0)
                return
            except KafkaException as exc:
                last = str(exc).replace(self.password, "***")
            time.sleep(0.5)
        assert self.broker is not None
        raise KafkaBrokerError(
            f"no SASL_SSL login on {self.bootstrap_servers} within {self.ready_timeout_s:.0f} s ({last}); "
            f"log {self.broker.log_dir}"
        )

    def stop(self, *, keep_log_dir: bool | None = None) -> None:
        """Stop the node (its folder kept if `keep_log_dir`) and remove the certificate folder made here."""
        if self.broker is not None:
            self.broker.stop(keep_log_dir=keep_log_dir)
        if self._owned_folder and self.folder is not None and not keep_log_dir:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
            self._owned_folder = False

    def __enter__(self) -> SecuredKafka:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
