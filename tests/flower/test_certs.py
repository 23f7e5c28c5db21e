"""deploy/gen_certs.py writes what flower-superlink and flower-supernode load."""

from __future__ import annotations

import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, padding
from cryptography.hazmat.primitives.serialization import (
    load_pem_private_key,
    load_ssh_private_key,
    load_ssh_public_key,
)


def test_certificates_chain_to_the_ca_and_name_the_hosts(tmp_path):
    from ldpfda.deploy.gen_certs import generate

    out = generate(
        tmp_path / "certs", hosts=["link.example.org", "10.1.2.3"], supernodes=2
    )
    ca = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
    server = x509.load_pem_x509_certificate((out / "server.crt").read_bytes())
    assert server.issuer == ca.subject
    ca.public_key().verify(
        server.signature,
        server.tbs_certificate_bytes,
        padding.PKCS1v15(),
        server.signature_hash_algorithm,
    )
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"localhost", "link.example.org"} <= set(
        san.get_values_for_type(x509.DNSName)
    )
    assert {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("10.1.2.3")} <= set(
        san.get_values_for_type(x509.IPAddress)
    )
    key = load_pem_private_key((out / "server.key").read_bytes(), None)
    assert key.public_key().public_numbers() == server.public_key().public_numbers()
    assert (out / "server.key").stat().st_mode & 0o077 == 0


def test_supernode_keys_are_openssh_p384_pairs(tmp_path):
    from ldpfda.deploy.gen_certs import generate

    out = generate(tmp_path, supernodes=2)
    for i in range(2):
        private = load_ssh_private_key((out / f"supernode-{i}").read_bytes(), None)
        public = load_ssh_public_key((out / f"supernode-{i}.pub").read_bytes())
        assert isinstance(private, ec.EllipticCurvePrivateKey)
        assert isinstance(private.curve, ec.SECP384R1)
        assert private.public_key().public_numbers() == public.public_numbers()
