#!/usr/bin/env python3
"""Captures the raw XML bodies an S3-compatible server answers to the requests ckpt's S3 client sends.

Run it under tools/s3-test-server.py, with the Python (and PATH) of the environment that has the server:

  PATH=VENV/bin:$PATH VENV/bin/python tools/s3-test-server.py --server moto run -- \
      VENV/bin/python tests/data/s3_responses/capture.py tests/data/s3_responses

It reads AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, CKPT_S3_TEST_BUCKET and
CKPT_S3_TEST_SERVER from the launcher, and writes into OUTDIR/<server>-<version>/ (the version of moto is
the installed package's, that of seaweedfs what `weed version` says; --name overrides the folder name):

  <operation>[-<case>].xml   each non-empty response body, byte for byte as the server sent it
  manifest.json              every request: method, target, status, response headers, body file or
                             "empty", and the CRC32s sent (per part, composite and full-object)

Requests are shaped as include/ckpt/object/impl/s3_client_inl.hpp sends them: path-style URLs, SigV4
with x-amz-content-sha256: UNSIGNED-PAYLOAD, queries sorted and encoded as the client does. Only the
standard library is used (SigV4 is computed here), so any Python 3.8+ runs it.
"""
import argparse
import base64
import datetime
import hashlib
import hmac
import html
import http.client
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
import zlib

NS = "http://s3.amazonaws.com/doc/2006-03-01/"
PREFIX = "p/"


def uri_encode(text, keep_slash):
    """As s3_detail::uri_encode: RFC 3986 unreserved kept, '/' kept when asked, the rest %XX."""
    safe = "-_.~" + ("/" if keep_slash else "")
    return urllib.parse.quote(text, safe=safe)


def crc32_b64(data):
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def composite_crc32_b64(part_checksums):
    """S3's COMPOSITE CRC32 of a multipart object: the CRC32 of the parts' raw CRC32s, then -N."""
    raw = b"".join(base64.b64decode(c) for c in part_checksums)
    return f"{crc32_b64(raw)}-{len(part_checksums)}"


class Signer:
    """AWS Signature Version 4 for S3 (header form, unsigned payload), as curl --aws-sigv4 sends it."""

    def __init__(self, access_key, secret_key, region):
        self.access_key, self.secret_key, self.region = access_key, secret_key, region

    def sign(self, method, host, path, query, headers):
        now = datetime.datetime.now(datetime.timezone.utc)
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        day = amz_date[:8]
        headers = dict(headers)
        headers["x-amz-date"] = amz_date
        headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD"
        signed = {"host": host}
        for name, value in headers.items():
            lower = name.lower()
            if lower.startswith("x-amz-") or lower in ("content-type", "content-md5"):
                signed[lower] = " ".join(str(value).strip().split())
        names = sorted(signed)
        canonical_headers = "".join(f"{n}:{signed[n]}\n" for n in names)
        signed_headers = ";".join(names)
        pairs = []
        for item in query.split("&") if query else []:
            key, _, value = item.partition("=")
            pairs.append((key, value))  # already encoded as the client encodes them
        canonical_query = "&".join(f"{k}={v}" for k, v in sorted(pairs))
        canonical = "\n".join([method, path, canonical_query, canonical_headers, signed_headers, "UNSIGNED-PAYLOAD"])
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        key = ("AWS4" + self.secret_key).encode()
        for part in (day, self.region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, "
                                    f"SignedHeaders={signed_headers}, Signature={signature}")
        return headers


class Capture:
    def __init__(self, endpoint, bucket, signer, outdir):
        parsed = urllib.parse.urlsplit(endpoint)
        self.host = parsed.netloc
        self.bucket = bucket
        self.signer = signer
        self.outdir = outdir
        self.entries = []

    def request(self, method, key=None, query="", headers=None, body=b"", bucket=None, signer=None):
        """One signed request on a fresh connection: (status, reason, [(name, value)], body bytes)."""
        bucket = self.bucket if bucket is None else bucket
        path = "/" + bucket + ("/" + uri_encode(key, True) if key is not None else "")
        signed = (signer or self.signer).sign(method, self.host, path, query, headers or {})
        conn = http.client.HTTPConnection(self.host, timeout=60)
        try:
            conn.request(method, path + ("?" + query if query else ""), body=body, headers=signed)
            response = conn.getresponse()
            data = response.read()
            return response.status, response.reason, response.getheaders(), data, path, query
        finally:
            conn.close()

    def record(self, name, method, key=None, query="", headers=None, body=b"", note="", **kwargs):
        """Sends a request, saves a non-empty body as NAME.xml (name None: never saved), logs it."""
        try:
            status, reason, response_headers, data, path, query = self.request(method, key, query, headers, body, **kwargs)
        except (OSError, http.client.HTTPException) as exc:
            self.entries.append({"name": name, "method": method, "key": key, "query": query, "error": repr(exc)})
            print(f"  {name}: {method} failed: {exc!r}", file=sys.stderr)
            return None, [], b""
        entry = {"name": name, "method": method, "target": path + ("?" + query if query else ""),
                 "request_headers": {k: v for k, v in (headers or {}).items()},
                 "request_body": body.decode() if body and len(body) < 4096 else (f"<{len(body)} bytes>" if body else ""),
                 "status": status, "reason": reason, "response_headers": response_headers,
                 "body_bytes": len(data)}
        if note:
            entry["note"] = note
        if not data:
            entry["body_file"] = "empty"
        elif name:
            # XML as .xml; an error page that is not XML (moto's HTML 500) as .html or .txt; a 2xx body that
            # is not XML (object data: moto checks no signature) is not kept.
            kind = body_kind(data, header(response_headers, "Content-Type"))
            if kind == "xml" or status >= 300:
                file = f"{name}.{kind}"
                with open(os.path.join(self.outdir, file), "wb") as f:
                    f.write(data)
                entry["body_file"] = file
            else:
                entry["body_file"] = f"not kept: {len(data)} bytes of {header(response_headers, 'Content-Type')!r}"
        self.entries.append(entry)
        print(f"  {name or method + ' ' + (key or '')}: {status} {reason}, {len(data)} bytes", file=sys.stderr)
        return status, response_headers, data


def body_kind(data, content_type):
    head = data.lstrip()[:200].lower()
    if head.startswith(b"<?xml") or (head.startswith(b"<") and not head.startswith((b"<!doctype", b"<html"))):
        return "xml"
    if b"<html" in head or "html" in content_type:
        return "html"
    return "txt"


def header(headers, name):
    for k, v in headers:
        if k.lower() == name.lower():
            return v
    return ""


def xml_value(data, element):
    match = re.search(rb"<" + element.encode() + rb">([^<]*)</" + element.encode() + rb">", data or b"")
    return html.unescape(match.group(1).decode()) if match else ""


def complete_body(parts):
    """As S3Client::complete_upload builds it (pugixml, format_raw, no declaration)."""
    xml = f'<CompleteMultipartUpload xmlns="{NS}">'
    for number, etag, checksum in parts:
        xml += f"<Part><PartNumber>{number}</PartNumber><ETag>&quot;{etag}&quot;</ETag>"
        if checksum:
            xml += f"<ChecksumCRC32>{checksum}</ChecksumCRC32>"
        xml += "</Part>"
    return (xml + "</CompleteMultipartUpload>").encode()


def server_name():
    kind = os.environ.get("CKPT_S3_TEST_SERVER", "s3")
    version = "unknown"
    if kind == "moto":
        try:
            version = importlib.metadata.version("moto")
        except importlib.metadata.PackageNotFoundError:
            pass
    elif kind == "seaweedfs":
        weed = shutil.which("weed", path=os.path.dirname(sys.executable)) or shutil.which("weed")
        if weed:
            out = subprocess.run([weed, "version"], capture_output=True, text=True).stdout
            match = re.search(r"version\s+\S+\s+([0-9][0-9.]*)", out)
            if match:
                version = match.group(1)
    return f"{kind}-{version}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("outdir", help="the corpus folder; the bodies go into OUTDIR/<server>-<version>/")
    parser.add_argument("--name", help="the subfolder's name (default: <server>-<version>)")
    args = parser.parse_args()
    env = os.environ
    name = args.name or server_name()
    outdir = os.path.join(args.outdir, name)
    os.makedirs(outdir, exist_ok=True)
    for old in os.listdir(outdir):  # a re-run replaces the folder's bodies
        if old.endswith((".xml", ".html", ".txt")) or old == "manifest.json":
            os.remove(os.path.join(outdir, old))
    signer = Signer(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env.get("AWS_REGION", "us-east-1"))
    bucket = env["CKPT_S3_TEST_BUCKET"]
    cap = Capture(env["AWS_ENDPOINT_URL"], bucket, signer, outdir)
    print(f"capture.py: {name} at {env['AWS_ENDPOINT_URL']} into {outdir}", file=sys.stderr)
    list_query = lambda max_keys, token="": (  # noqa: E731
        (f"continuation-token={uri_encode(token, False)}&" if token else "")
        + f"list-type=2&max-keys={max_keys}&prefix={uri_encode(PREFIX, False)}")

    def uploads_query(max_uploads, key_marker="", upload_id_marker=""):
        q = f"key-marker={uri_encode(key_marker, False)}&" if key_marker else ""
        q += f"max-uploads={max_uploads}&prefix={uri_encode(PREFIX, False)}&"
        if upload_id_marker:
            q += f"upload-id-marker={uri_encode(upload_id_marker, False)}&"
        return q + "uploads="

    octet = {"Content-Type": "application/octet-stream"}
    xml_type = {"Content-Type": "application/xml"}

    # 1. ListObjectsV2 and ListMultipartUploads on an empty prefix.
    cap.record("list_objects_v2-empty", "GET", query=list_query(1000))
    cap.record("list_multipart_uploads-empty", "GET", query=uploads_query(1000))

    # 2. Three objects under the prefix: listed whole, truncated at 2, and the page after the token.
    # An object outside the prefix, so that a listing that ignores prefix shows it.
    for k in [f"{PREFIX}obj-{i}" for i in (1, 2, 3)] + ["q/outside"]:
        cap.record(None, "PUT", k, headers=octet, body=f"object {k[-1]}\n".encode())
    cap.record("list_objects_v2-three", "GET", query=list_query(1000))
    _, _, page = cap.record("list_objects_v2-truncated", "GET", query=list_query(2))
    token = xml_value(page, "NextContinuationToken")
    if token:
        cap.record("list_objects_v2-continued", "GET", query=list_query(2, token))

    # 3. A multipart upload as the client makes it: CRC32 parts, then completed.
    part1 = bytes((i * 7 + 3) % 251 for i in range(251)) * (5 * 1024 * 1024 // 251 + 1)
    part1 = part1[:5 * 1024 * 1024]
    part2 = b"ckpt part two\n" * 73
    sums = [crc32_b64(part1), crc32_b64(part2)]
    checksums = {"part_crc32": sums, "composite_crc32": composite_crc32_b64(sums),
                 "full_object_crc32": crc32_b64(part1 + part2),
                 "part_sizes": [len(part1), len(part2)]}
    key = f"{PREFIX}mpu"

    def upload(key, parts, record):
        """CreateMultipartUpload and UploadPart: (upload id, [(number, etag, crc32)], [part response headers])."""
        _, _, data = cap.record("create_multipart_upload" if record else None, "POST", key, "uploads=",
                                {**octet, "x-amz-checksum-algorithm": "CRC32"})
        upload_id = xml_value(data, "UploadId")
        done, answers = [], []
        for number, body in parts:
            crc = crc32_b64(body)
            _, headers, _ = cap.record(f"upload_part-{number}" if record else None, "PUT", key,
                                       f"partNumber={number}&uploadId={uri_encode(upload_id, False)}",
                                       {**octet, "x-amz-sdk-checksum-algorithm": "CRC32", "x-amz-checksum-crc32": crc},
                                       body)
            done.append((number, header(headers, "ETag").strip('"'), crc))
            answers.append(headers)
        return upload_id, done, answers

    upload_id, parts, answers = upload(key, [(1, part1), (2, part2)], True)
    checksums["upload_part_response_etag"] = [header(h, "ETag") for h in answers]
    checksums["upload_part_response_crc32"] = [header(h, "x-amz-checksum-crc32") for h in answers]
    _, _, data = cap.record("complete_multipart_upload", "POST", key, f"uploadId={uri_encode(upload_id, False)}",
                            xml_type, complete_body(parts))
    checksums["complete_response_crc32"] = xml_value(data, "ChecksumCRC32")
    checksums["complete_response_checksum_type"] = xml_value(data, "ChecksumType")
    # The same request again, as a client retries a CompleteMultipartUpload whose answer it lost.
    cap.record("complete_multipart_upload-already_completed", "POST", key, f"uploadId={uri_encode(upload_id, False)}",
               xml_type, complete_body(parts))

    # 4. The same key again, completed with If-None-Match: * (the key exists now).
    upload_id, parts, _ = upload(key, [(1, part1), (2, part2)], False)
    cap.record("complete_multipart_upload-if_none_match_existing", "POST", key,
               f"uploadId={uri_encode(upload_id, False)}", {**xml_type, "If-None-Match": "*"}, complete_body(parts))
    cap.record(None, "DELETE", key, f"uploadId={uri_encode(upload_id, False)}")

    # 5. A wrong ETag (InvalidPart) and an upload id nobody made (NoSuchUpload).
    bad_key = f"{PREFIX}mpu-bad"
    upload_id, parts, _ = upload(bad_key, [(1, part2)], False)
    cap.record("complete_multipart_upload-invalid_part", "POST", bad_key, f"uploadId={uri_encode(upload_id, False)}",
               xml_type, complete_body([(1, "0123456789abcdef0123456789abcdef", parts[0][2])]))
    cap.record(None, "DELETE", bad_key, f"uploadId={uri_encode(upload_id, False)}")
    cap.record("complete_multipart_upload-no_such_upload", "POST", f"{PREFIX}mpu-none",
               f"uploadId={uri_encode('ckpt-made-up-upload-id', False)}", xml_type,
               complete_body([(1, "0123456789abcdef0123456789abcdef", crc32_b64(part2))]))

    # 6. Three open uploads under the prefix: listed whole, truncated at 2, and the page after the markers.
    # One more outside the prefix, so that a listing that ignores prefix shows it.
    open_ids = []
    for k in [f"{PREFIX}up-{i}" for i in (1, 2, 3)] + ["q/outside-upload"]:
        _, _, data = cap.record(None, "POST", k, "uploads=", {**octet, "x-amz-checksum-algorithm": "CRC32"})
        open_ids.append((k, xml_value(data, "UploadId")))
    cap.record("list_multipart_uploads-three", "GET", query=uploads_query(1000))
    _, _, page = cap.record("list_multipart_uploads-truncated", "GET", query=uploads_query(2))
    if xml_value(page, "IsTruncated") == "true":
        # The next page as S3Client::list_uploads asks for it: NextKeyMarker, or else the page's last key.
        next_key, next_id = xml_value(page, "NextKeyMarker"), xml_value(page, "NextUploadIdMarker")
        last_key = ([xml_value(u, "Key") for u in re.findall(rb"<Upload>.*?</Upload>", page, re.S)] or [""])[-1]
        cap.record("list_multipart_uploads-continued", "GET", query=uploads_query(2, next_key or last_key, next_id))
        if not next_key and next_id:  # and with only the marker the server gave
            cap.record("list_multipart_uploads-continued_upload_id_marker_only", "GET",
                       query=uploads_query(2, "", next_id))
    for k, u in open_ids:
        cap.record(None, "DELETE", k, f"uploadId={uri_encode(u, False)}")

    # 7. Errors.
    cap.record("error-no_such_key", "GET", f"{PREFIX}missing")
    cap.record("error-precondition_failed", "PUT", f"{PREFIX}obj-1", headers={**octet, "If-None-Match": "*"},
               body=b"again\n")
    cap.record("error-signature_does_not_match", "GET", f"{PREFIX}obj-1",
               signer=Signer(signer.access_key, signer.secret_key + "-wrong", signer.region))
    cap.record("error-no_such_bucket", "GET", query=list_query(1000), bucket=bucket + "-missing")

    # 8. CopyObject.
    cap.record("copy_object", "PUT", f"{PREFIX}copy-dst", headers={"x-amz-copy-source": f"/{bucket}/{PREFIX}obj-1"})

    manifest = {"server": name, "endpoint_kind": env.get("CKPT_S3_TEST_SERVER", ""),
                "captured": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
                "checksums": checksums, "requests": cap.entries}
    with open(os.path.join(outdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    kept = sum(1 for e in cap.entries if e.get("body_file", "").endswith((".xml", ".html", ".txt")))
    print(f"capture.py: {kept} bodies written", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
