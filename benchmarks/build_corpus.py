"""Build Tessera's bundled training corpus from English text that ships with Debian and CPython.

Run once by a maintainer (``python -m benchmarks.build_corpus``); its output,
``training/corpus/tessera-en-v1.jsonl``, is committed and pinned by sha256 in ``training/corpus.py``.
Nothing is downloaded: the sources are the CPython 3.11 ``pydoc_data.topics`` (the language reference's
help topics), the licence texts of ``/usr/share/common-licenses`` and Vim's user manual
(``/usr/share/vim/vim90/doc/usr_*.txt``). Each source is split at blank lines into documents of at most
``MAX_DOC_BYTES`` bytes, so the DiPaCo router and the held-out split work per document.
"""

from __future__ import annotations

import hashlib
import json
import runpy
import sys
from pathlib import Path

MAX_DOC_BYTES = 3000
OUT = Path(__file__).resolve().parent.parent / "training" / "corpus" / "tessera-en-v1.jsonl"
PYDOC_TOPICS = Path("/usr/lib/python3.11/pydoc_data/topics.py")
LICENSES = Path("/usr/share/common-licenses")
VIM_DOCS = Path("/usr/share/vim/vim90/doc")


def _split(text: str) -> list[str]:
    """Greedily pack blank-line-separated paragraphs into documents of at most MAX_DOC_BYTES."""
    docs: list[str] = []
    cur: list[str] = []
    size = 0
    for para in text.replace("\r\n", "\n").split("\n\n"):
        para = para.strip("\n")
        if not para.strip():
            continue
        n = len(para.encode()) + 2
        if cur and size + n > MAX_DOC_BYTES:
            docs.append("\n\n".join(cur))
            cur, size = [], 0
        cur.append(para)
        size += n
    if cur:
        docs.append("\n\n".join(cur))
    return [d for d in docs if len(d) >= 200]


def _sources() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    topics = runpy.run_path(str(PYDOC_TOPICS))["topics"]
    for name in sorted(topics):
        out.append((f"pydoc/{name}", topics[name]))
    for path in sorted(LICENSES.iterdir()):
        if path.is_file() and not path.is_symlink():
            out.append((f"license/{path.name}", path.read_text(encoding="utf-8", errors="replace")))
    for path in sorted(VIM_DOCS.glob("usr_*.txt")):
        out.append((f"vim/{path.name}", path.read_text(encoding="utf-8", errors="replace")))
    return out


def main() -> int:
    lines: list[str] = []
    for source, text in _sources():
        for i, doc in enumerate(_split(text)):
            lines.append(json.dumps({"id": f"{source}#{i}", "text": doc}, ensure_ascii=False, sort_keys=True))
    data = ("\n".join(lines) + "\n").encode()
    OUT.write_bytes(data)
    print(f"{OUT}: {len(lines)} documents, {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
