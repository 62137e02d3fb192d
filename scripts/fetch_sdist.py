#!/usr/bin/env python3
"""Downloads one pinned sdist from PyPI's simple index (PIP_INDEX_URL, else https://pypi.org/simple) and checks
its sha256, without running its build backend (`pip download` of an sdist prepares its metadata first, which
for llama-cpp-python takes minutes). Usage: fetch_sdist.py PROJECT VERSION SHA256 DEST_DIR; prints the file's
path. Exit status 1 (with the reason on stderr) when the file is not listed or its hash differs."""
import hashlib
import os
import pathlib
import re
import sys
import urllib.parse
import urllib.request


def main(project, version, sha256, dest):
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    filename = f"{project.replace('-', '_')}-{version}.tar.gz"
    page = urllib.request.urlopen(f"{index}/{project}/", timeout=120).read().decode()
    links = re.findall(r'href="([^"#]*/' + re.escape(filename) + r')(?:#[^"]*)?"', page)
    if not links:
        sys.exit(f"fetch_sdist: {filename} is not listed at {index}/{project}/")
    url = urllib.parse.urljoin(f"{index}/{project}/", links[0])
    target = pathlib.Path(dest) / filename
    partial = target.with_name(filename + ".part")
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=300) as response, open(partial, "wb") as out:
        while chunk := response.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    if digest.hexdigest() != sha256:
        partial.unlink()
        sys.exit(f"fetch_sdist: {filename} has sha256 {digest.hexdigest()}, expected {sha256}")
    partial.rename(target)
    print(target)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
