"""``python -m hbcore.autotune LOG --png OUT``: draws an autotune log."""
import argparse
import sys
from typing import List, Optional

from hbcore.autotune.plot import plot


def main(argv: Optional[List[str]] = None) -> int:
    """Parses the command line and draws the picture.

    Args:
        argv: the arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit status (0; argparse exits 2 on bad arguments).
    """
    parser = argparse.ArgumentParser(
        prog="python -m hbcore.autotune",
        description="Draw an hbcore autotune log (HB_AUTOTUNE_LOG): scores "
        "against the tuned parameters, the chosen point marked.")
    parser.add_argument("log", help="the CSV log")
    parser.add_argument("--png", required=True, help="the picture to write")
    args = parser.parse_args(argv)
    try:
        plot(args.log, args.png)
    except (OSError, ValueError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    print("wrote %s" % args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
