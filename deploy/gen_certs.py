"""Generate a self-signed CA, a SuperLink TLS certificate and SuperNode auth keys.

For tests and pilots only: in production, use certificates from your organisation's CA
and keep every private key on the host that owns it.

Usage::

    python -m ldpfda.deploy.gen_certs OUTDIR [--hosts superlink.example.org 10.0.0.5]
                                      [--supernodes 3] [--days 365]

Writes to ``OUTDIR``: ``ca.crt`` and ``ca.key``, the certificate authority
(``ca.key`` stays with whoever signs certificates); ``server.crt`` and ``server.key``,
the SuperLink's certificate signed by the CA, valid for ``localhost``, ``127.0.0.1``,
``::1`` and every ``--hosts`` name or address (``flower-superlink --ssl-ca-certfile
ca.crt --ssl-certfile server.crt --ssl-keyfile server.key``); ``supernode-<i>`` and
``supernode-<i>.pub``, one EC P-384 key pair per SuperNode in OpenSSH format (the
SuperNode starts with ``--auth-supernode-private-key supernode-<i>``; the federation
owner registers the public key with ``flwr supernode register supernode-<i>.pub
<connection>``). Only the ``cryptography`` package (a Flower dependency) is needed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["generate"]


def _write_key(path: Path, key: Any, fmt: serialization.PrivateFormat) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption())
    )
    os.chmod(path, 0o600)


def _san(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(["localhost", "127.0.0.1", "::1", *hosts]):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _certificate(
    path: Path,
    common_name: str,
    validity: tuple[dt.datetime, dt.datetime],
    extensions: Sequence[tuple[x509.ExtensionType, bool]],
    issuer: tuple[x509.Name, rsa.RSAPrivateKey] | None = None,
) -> tuple[x509.Name, rsa.RSAPrivateKey]:
    """A new RSA key ``<path>.key`` and its certificate ``<path>.crt``, signed by
    ``issuer`` (name, key) or self-signed; the subject's (name, key)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    issuer_name, signer = issuer or (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(validity[0])
        .not_valid_after(validity[1])
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    cert = builder.sign(signer, hashes.SHA256())
    _write_key(
        path.with_suffix(".key"), key, serialization.PrivateFormat.TraditionalOpenSSL
    )
    path.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return subject, key


def generate(
    outdir: str | Path,
    *,
    hosts: Sequence[str] = (),
    supernodes: int = 0,
    days: int = 365,
) -> Path:
    """Write the CA, the SuperLink certificate (valid ``days`` days, also for the DNS
    names or IP addresses ``hosts``) and ``supernodes`` key pairs into ``outdir``
    (created if needed, existing files overwritten); ``outdir``."""
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    validity = (now, now + dt.timedelta(days=days))
    usage = x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=True,
        crl_sign=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )
    ca = _certificate(
        out / "ca",
        "ldpfda test CA",
        validity,
        [(x509.BasicConstraints(ca=True, path_length=0), True), (usage, True)],
    )
    _certificate(
        out / "server",
        hosts[0] if hosts else "localhost",
        validity,
        [
            (_san(hosts), False),
            (x509.BasicConstraints(ca=False, path_length=None), True),
            (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
        ],
        issuer=ca,
    )
    for i in range(supernodes):
        key = ec.generate_private_key(ec.SECP384R1())
        _write_key(out / f"supernode-{i}", key, serialization.PrivateFormat.OpenSSH)
        public = key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        (out / f"supernode-{i}.pub").write_bytes(public + b"\n")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("outdir", type=Path)
    parser.add_argument(
        "--hosts",
        nargs="*",
        default=[],
        help="extra DNS names / IP addresses of the SuperLink",
    )
    parser.add_argument(
        "--supernodes", type=int, default=0, help="number of SuperNode auth key pairs"
    )
    parser.add_argument("--days", type=int, default=365)
    args = parser.parse_args(argv)
    out = generate(
        args.outdir, hosts=args.hosts, supernodes=args.supernodes, days=args.days
    )
    print(f"certificates and keys written to {out}")


if __name__ == "__main__":
    main()
