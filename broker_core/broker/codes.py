"""Response codes of the broker's send processors and the mapping from a store put status.

The numbers are RocketMQ's ``ResponseCode`` values; the remarks are 4.9.4's
``SendMessageProcessor.handlePutMessageResult`` texts, so a client model can match on them.
"""

from __future__ import annotations

SUCCESS = 0
SYSTEM_ERROR = 1
SYSTEM_BUSY = 2
FLUSH_DISK_TIMEOUT = 10
SLAVE_NOT_AVAILABLE = 11
FLUSH_SLAVE_TIMEOUT = 12
MESSAGE_ILLEGAL = 13
SERVICE_NOT_AVAILABLE = 14
NO_PERMISSION = 16
TOPIC_NOT_EXIST = 17
SUBSCRIPTION_GROUP_NOT_EXIST = 26
NO_BUYER_ID = 204
NOT_IN_CURRENT_UNIT = 205
ILLEGAL_OPERATION = 604  # 5.x ResponseCode: a recall whose handle or time does not fit

# Put statuses that still count as stored (sendOK = true in 4.9.4): the client gets the code but
# also the msgId and offsets, because the record is in the commit log.
_STORED_WITH_CODE = {
    "PUT_OK": SUCCESS,
    "FLUSH_DISK_TIMEOUT": FLUSH_DISK_TIMEOUT,
    "FLUSH_SLAVE_TIMEOUT": FLUSH_SLAVE_TIMEOUT,
    "SLAVE_NOT_AVAILABLE": SLAVE_NOT_AVAILABLE,
}

_ILLEGAL_REMARK = ("the message is illegal, maybe msg body or properties length not matched. "
                   "msg body length limit 128k, msg properties length limit 32k.")
_NOT_STORED = {
    "CREATE_MAPEDFILE_FAILED": (SYSTEM_ERROR,
                                "create mapped file failed, server is busy or broken."),
    "CREATE_MAPPED_FILE_FAILED": (SYSTEM_ERROR,
                                  "create mapped file failed, server is busy or broken."),
    "MESSAGE_ILLEGAL": (MESSAGE_ILLEGAL, _ILLEGAL_REMARK),
    "PROPERTIES_SIZE_EXCEEDED": (MESSAGE_ILLEGAL, _ILLEGAL_REMARK),
    "SERVICE_NOT_AVAILABLE": (
        SERVICE_NOT_AVAILABLE,
        "service not available now. It may be caused by one of the following reasons: the "
        "broker's disk is full, messages are put to the slave, message store has been shut "
        "down, etc."),
    "OS_PAGECACHE_BUSY": (SYSTEM_ERROR, "[PC_SYNCHRONIZED]broker busy, start flow control for a while"),
    "UNKNOWN_ERROR": (SYSTEM_ERROR, "UNKNOWN_ERROR"),
}


def status_name(status: object) -> str:
    """A put status as its RocketMQ name, whether the store hands out an enum or a string."""
    name = getattr(status, "name", status)
    assert isinstance(name, str), f"put status {status!r} has no name"
    return name


def put_status_response(status: object) -> tuple[int, str, bool]:
    """``(code, remark, stored)`` for a store put status, as handlePutMessageResult maps it."""
    name = status_name(status)
    code = _STORED_WITH_CODE.get(name)
    if code is not None:
        return code, "" if code == SUCCESS else name, True
    code, remark = _NOT_STORED.get(name, (SYSTEM_ERROR, "UNKNOWN_ERROR DEFAULT"))
    return code, remark, False


def send_back_response(status: object) -> tuple[int, str]:
    """CONSUMER_SEND_MSG_BACK: PUT_OK is SUCCESS, anything else SYSTEM_ERROR named by the status."""
    name = status_name(status)
    if name == "PUT_OK":
        return SUCCESS, ""
    return SYSTEM_ERROR, name
