"""The one parser for the text of boolean and numeric settings: hbcore's
knobs (``HB_*``/``HOROVOD_*``, hbrun's flags: knobs.py) and hbcore_tf's
options (``HB_<OPTION>``: hbcore_tf/_base/options.py).

Bools accept both projects' words, everywhere: ``1``/``true``/``yes``/
``on`` and ``0``/``false``/``no``/``off`` in any case (HybridBackend
documents TRUE/YES/1 and FALSE/NO/0), and a whole number >= 0, true when
greater than 0 (Horovod reads its switches as ``strtol(value) > 0``).
Surrounding whitespace is ignored. Anything else is an error naming the
setting and the value, never a silent false. The core's parser
(csrc/core/src/common/config.cc, ParseBool) accepts the same words;
tests/test_setting_values.py checks both against one table.
"""

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
BOOL_WORDS = "1, true, yes, on, 0, false, no, off, or a whole number >= 0"


def parse_bool(setting: str, text: str) -> bool:
    """Parses a bool setting's text.

    Args:
        setting: What is being set, for the message (e.g. ``HB_TIMELINE``).
        text: Its text.

    Returns:
        The value.

    Raises:
        ValueError: ``text`` is none of the accepted words; the message
            names ``setting`` and ``text``.
    """
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    if word.isdigit() and word.isascii():
        return int(word) > 0
    raise ValueError("invalid value for %s: %r (expected a bool: %s)"
                     % (setting, text, BOOL_WORDS))


def parse_number(setting: str, text: str, kind: type) -> float:
    """Parses a numeric setting's text.

    Args:
        setting: What is being set, for the message.
        text: Its text; surrounding whitespace is ignored.
        kind: ``int`` (a whole number in decimal) or ``float``.

    Returns:
        The value, of type ``kind``.

    Raises:
        ValueError: ``text`` is not a number of that kind (a float must
            be finite); the message names ``setting`` and ``text``.
    """
    try:
        value = kind(text.strip())
    except ValueError:
        value = None
    if value is None or (kind is float and value - value != 0):
        raise ValueError("invalid value for %s: %r (expected %s)" % (
            setting, text, "an integer" if kind is int else
            "a finite number"))
    return value
