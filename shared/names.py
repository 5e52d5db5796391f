"""Name syntax of the Kubernetes API: qualified names, label values and DNS-1123 labels and subdomains.

One implementation for every part that validates names: label and annotation keys in the configuration,
node-selector terms (the scheduler rejects a term whose key or value the API server would not accept as a
label), extended resource names, and the configuration's namespace and object names.

Each check mirrors a function of ``staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go``:

* :func:`qualified_name_error` is ``IsQualifiedName``: ``[prefix/]name``; the split is ``strings.Split(v, "/")``,
  so two slashes are an error; the prefix is a DNS-1123 subdomain (at most 253 characters), the name at most
  63 characters of ``[-A-Za-z0-9_.]`` with an alphanumeric first and last character.
* :func:`label_value_error` is ``IsValidLabelValue``: empty, or a name part as above (at most 63 characters).
* :func:`dns1123_label_error` is ``IsDNS1123Label`` (namespaces): at most 63 of ``[-a-z0-9]``, alphanumeric ends.
* :func:`dns1123_subdomain_error` is ``IsDNS1123Subdomain`` (most object names): dot-separated DNS labels, at
  most 253 characters.

The ``*_error`` functions return upstream's message (quoted value first) or ``None``; the ``is_*`` functions
are the boolean forms for callers that phrase their own message.
"""

from __future__ import annotations

import re

__all__ = [
    "qualified_name_error",
    "label_value_error",
    "dns1123_label_error",
    "dns1123_subdomain_error",
    "is_qualified_name",
    "is_label_value",
    "is_dns1123_label",
    "is_dns1123_subdomain",
    "QUALIFIED_NAME_MAX_LENGTH",
    "LABEL_VALUE_MAX_LENGTH",
    "DNS1123_LABEL_MAX_LENGTH",
    "DNS1123_SUBDOMAIN_MAX_LENGTH",
]

QUALIFIED_NAME_MAX_LENGTH = 63
LABEL_VALUE_MAX_LENGTH = 63
DNS1123_LABEL_MAX_LENGTH = 63
DNS1123_SUBDOMAIN_MAX_LENGTH = 253

# validation.go: qnameCharFmt, qnameExtCharFmt, qualifiedNameFmt, labelValueFmt, dns1123LabelFmt,
# dns1123SubdomainFmt. Go anchors them with ^...$ (end of text only); fullmatch is the same.
_QUALIFIED_NAME_RE = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE_RE = re.compile(r"(?:(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_DNS1123_LABEL_RE = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN_RE = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")

_NAME_CHARS = (
    "consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)


def dns1123_subdomain_error(value: str) -> str | None:
    """``IsDNS1123Subdomain``: a lower-case RFC 1123 subdomain of at most 253 characters."""
    if len(value) > DNS1123_SUBDOMAIN_MAX_LENGTH:
        return f"{value!r}: must be no more than {DNS1123_SUBDOMAIN_MAX_LENGTH} characters"
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        return (
            f"{value!r}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
            "or '.', and must start and end with an alphanumeric character"
        )
    return None


def dns1123_label_error(value: str) -> str | None:
    """``IsDNS1123Label``: a lower-case RFC 1123 label of at most 63 characters (namespace names)."""
    if len(value) > DNS1123_LABEL_MAX_LENGTH:
        return f"{value!r}: must be no more than {DNS1123_LABEL_MAX_LENGTH} characters"
    if not _DNS1123_LABEL_RE.fullmatch(value):
        return (
            f"{value!r}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
            "and must start and end with an alphanumeric character"
        )
    return None


def qualified_name_error(value: str) -> str | None:
    """``IsQualifiedName``: ``[prefix/]name`` as label and annotation keys are written."""
    parts = value.split("/")
    if len(parts) > 2:
        return f"{value!r}: a qualified name must be a name with an optional DNS subdomain prefix and '/'"
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            return f"{value!r}: prefix part must be non-empty"
        if len(prefix) > DNS1123_SUBDOMAIN_MAX_LENGTH or not _DNS1123_SUBDOMAIN_RE.fullmatch(prefix):
            return f"{value!r}: prefix part must be a lowercase RFC 1123 subdomain"
    name = parts[-1]
    if not name:
        return f"{value!r}: name part must be non-empty"
    if len(name) > QUALIFIED_NAME_MAX_LENGTH:
        return f"{value!r}: name part must be no more than {QUALIFIED_NAME_MAX_LENGTH} characters"
    if not _QUALIFIED_NAME_RE.fullmatch(name):
        return f"{value!r}: name part must {_NAME_CHARS}"
    return None


def label_value_error(value: str) -> str | None:
    """``IsValidLabelValue``: empty, or at most 63 name characters with alphanumeric ends."""
    if len(value) > LABEL_VALUE_MAX_LENGTH:
        return f"{value!r}: a label value must be no more than {LABEL_VALUE_MAX_LENGTH} characters"
    if not _LABEL_VALUE_RE.fullmatch(value):
        return f"{value!r}: a label value must be an empty string or {_NAME_CHARS}"
    return None


def is_qualified_name(value: str) -> bool:
    return qualified_name_error(value) is None


def is_label_value(value: str) -> bool:
    return label_value_error(value) is None


def is_dns1123_label(value: str) -> bool:
    return dns1123_label_error(value) is None


def is_dns1123_subdomain(value: str) -> bool:
    return dns1123_subdomain_error(value) is None
