"""Generate a self-signed CA, a SuperLink TLS certificate and SuperNode auth keys.

For tests and pilots only: in production, use certificates from your organisation's CA
and keep every private key on the host that owns it.

Usage::

    python deploy/gen_certs.py OUTDIR [--hosts superlink.example.org 10.0.0.5]
                                      [--supernodes 3] [--days 365]

Writes to ``OUTDIR``:

``ca.crt``, ``ca.key``
    The certificate authority (``ca.key`` stays with whoever signs certificates).
``server.crt``, ``server.key``
    The SuperLink's certificate, signed by the CA, valid for ``localhost``,
    ``127.0.0.1``, ``::1`` and every ``--hosts`` name or address (subject alternative
    names): ``flower-superlink --ssl-ca-certfile ca.crt --ssl-certfile server.crt
    --ssl-keyfile server.key``.
``supernode-<i>`` and ``supernode-<i>.pub``
    One EC P-384 key pair per SuperNode, in OpenSSH format: the SuperNode starts with
    ``--auth-supernode-private-key supernode-<i>``; the federation owner registers the
    public key with ``flwr supernode register supernode-<i>.pub <connection>``.

Only the ``cryptography`` package (a Flower dependency) is needed; ``openssl`` is not.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["generate"]


def _write(path: Path, data: bytes, *, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        os.chmod(path, 0o600)


def _key_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _san(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(["localhost", "127.0.0.1", "::1", *hosts]):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def generate(
    outdir: str | Path,
    *,
    hosts: Sequence[str] = (),
    supernodes: int = 0,
    days: int = 365,
) -> Path:
    """Write the CA, the SuperLink certificate and ``supernodes`` key pairs.

    Parameters
    ----------
    outdir : path
        Created if needed; existing files are overwritten.
    hosts : sequence of str
        Extra DNS names or IP addresses the SuperLink is reached at.
    supernodes : int
        Number of SuperNode authentication key pairs.
    days : int
        Validity of the certificates.

    Returns
    -------
    Path
        ``outdir``.
    """
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    until = now + dt.timedelta(days=days)

    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ldpfda test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(out / "ca.key", _key_pem(ca_key), private=True)
    _write(out / "ca.crt", ca_cert.public_bytes(serialization.Encoding.PEM))

    server_key = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(
                        NameOID.COMMON_NAME, hosts[0] if hosts else "localhost"
                    )
                ]
            )
        )
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(_san(hosts), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(out / "server.key", _key_pem(server_key), private=True)
    _write(out / "server.crt", server_cert.public_bytes(serialization.Encoding.PEM))

    for i in range(supernodes):
        key = ec.generate_private_key(ec.SECP384R1())
        _write(
            out / f"supernode-{i}",
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.OpenSSH,
                serialization.NoEncryption(),
            ),
            private=True,
        )
        _write(
            out / f"supernode-{i}.pub",
            key.public_key().public_bytes(
                serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
            )
            + b"\n",
        )
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
