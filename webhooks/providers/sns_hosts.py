"""Where Amazon SNS's signing certificates and subscription confirmations may come from, and
which topics exist: ``https://sns.<region>.amazonaws.com`` only (port 443, no credentials or
fragment). A certificate URL is ``/SimpleNotificationService-<id>.pem`` (no query); a
``SubscribeURL`` is ``/?Action=ConfirmSubscription&TopicArn=<arn>&Token=<token>`` naming the
message's own topic and token; a topic is ``arn:aws[-us-gov]:sns:<region>:<12 digits>:<name>``.

Both the verifier (``sns``) and the fetchers (``sns_certs``) check these rules; they live apart so
that neither has to import the other (as ``paypal_hosts`` does for PayPal).
"""

from __future__ import annotations

import re
from urllib.parse import SplitResult, parse_qsl, urlsplit

REGION = r"[a-z]{2}(?:-[a-z]+)+-\d{1,2}"
HOST = re.compile(rf"sns\.({REGION})\.amazonaws\.com")
CERT_PATH = re.compile(r"/SimpleNotificationService-[A-Za-z0-9_-]{1,128}\.pem")
TOPIC_ARN = re.compile(rf"arn:aws(?:-us-gov)?:sns:({REGION}):\d{{12}}:[A-Za-z0-9_-]{{1,256}}(?:\.fifo)?")


def _sns_url(url: str) -> tuple[SplitResult, str] | None:
    """``(parts, region)`` of an ``https://sns.<region>.amazonaws.com`` URL, else None."""
    try:
        p = urlsplit(url)
        port = p.port
    except ValueError:  # "host:abc", "[::1": not a URL at all
        return None
    host = HOST.fullmatch(p.hostname or "")
    if p.scheme != "https" or host is None or port not in (None, 443) or p.username or p.password or p.fragment:
        return None
    return p, host.group(1)


def topic_region(arn: str) -> str | None:
    """The region of a topic ARN, or None when it is not one."""
    found = TOPIC_ARN.fullmatch(arn)
    return found.group(1) if found else None


def cert_region(url: str) -> str | None:
    """The region of an SNS certificate URL, or None when ``url`` is not one."""
    found = _sns_url(url)
    if found is None or found[0].query or not CERT_PATH.fullmatch(found[0].path):
        return None
    return found[1]


def is_sns_cert_url(url: str) -> bool:
    return cert_region(url) is not None


def is_subscribe_url(url: str, topic_arn: str | None = None, token: str | None = None) -> bool:
    """Whether ``url`` confirms a subscription at SNS (to ``topic_arn`` with ``token``, when given),
    in the topic's own region."""
    found = _sns_url(url)
    if found is None or found[0].path not in ("", "/"):
        return False
    query = parse_qsl(found[0].query, keep_blank_values=True)
    fields = dict(query)
    if len(fields) != len(query) or set(fields) != {"Action", "TopicArn", "Token"}:
        return False
    return (
        fields["Action"] == "ConfirmSubscription"
        and topic_region(fields["TopicArn"]) == found[1]
        and bool(fields["Token"])
        and (topic_arn is None or fields["TopicArn"] == topic_arn)
        and (token is None or fields["Token"] == token)
    )
