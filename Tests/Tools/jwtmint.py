#!/usr/bin/python3
"""Makes signing keys and signs JWTs for the gateway's JWT tests (Debian python3-jwt).

  jwtmint.py keys DIR KIND KID      writes DIR/KID.pem (private) and prints the public JWK
                                    (KIND: rsa, ec256, ec384, ed25519)
  jwtmint.py sign PEM ALG KID CLAIMS  prints a token; CLAIMS is a JSON object, KID "-" for none;
                                    the header may be changed with HEADER_JSON in the environment
  jwtmint.py hs256 SECRET_FILE CLAIMS  an HS256 token whose secret is the file's bytes
                                    (algorithm confusion: the RSA public key as the secret)
  jwtmint.py public PEM             prints the public key as PEM (for the confusion case)
"""
import base64
import json
import os
import sys

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def int_bytes(value, length=None):
    length = length or (value.bit_length() + 7) // 8
    return value.to_bytes(length, "big")


def keys(directory, kind, kid):
    if kind == "rsa":
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        numbers = key.public_key().public_numbers()
        jwk = {"kty": "RSA", "n": b64(int_bytes(numbers.n)), "e": b64(int_bytes(numbers.e))}
    elif kind in ("ec256", "ec384"):
        curve, size, crv = (ec.SECP256R1(), 32, "P-256") if kind == "ec256" else (ec.SECP384R1(), 48, "P-384")
        key = ec.generate_private_key(curve)
        numbers = key.public_key().public_numbers()
        jwk = {"kty": "EC", "crv": crv, "x": b64(int_bytes(numbers.x, size)), "y": b64(int_bytes(numbers.y, size))}
    elif kind == "ed25519":
        key = ed25519.Ed25519PrivateKey.generate()
        raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        jwk = {"kty": "OKP", "crv": "Ed25519", "x": b64(raw)}
    else:
        raise SystemExit("unknown key kind " + kind)
    jwk["kid"] = kid
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    with open(os.path.join(directory, kid + ".pem"), "wb") as out:
        out.write(pem)
    print(json.dumps(jwk))


def sign(pem_path, alg, kid, claims):
    with open(pem_path, "rb") as source:
        key = serialization.load_pem_private_key(source.read(), password=None)
    headers = json.loads(os.environ.get("HEADER_JSON", "{}"))
    if kid != "-":
        headers["kid"] = kid
    print(jwt.encode(json.loads(claims), key, algorithm=alg, headers=headers))


def hs256(secret_path, claims):
    # PyJWT refuses a PEM as an HMAC secret on purpose; the attack signs by hand.
    with open(secret_path, "rb") as source:
        secret = source.read()
    import hashlib
    import hmac
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = b64(claims.encode())
    signature = hmac.new(secret, (header + "." + payload).encode(), hashlib.sha256).digest()
    print(header + "." + payload + "." + b64(signature))


def public(pem_path):
    with open(pem_path, "rb") as source:
        key = serialization.load_pem_private_key(source.read(), password=None)
    sys.stdout.write(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode())


if __name__ == "__main__":
    command, arguments = sys.argv[1], sys.argv[2:]
    {"keys": keys, "sign": sign, "hs256": hs256, "public": public}[command](*arguments)
