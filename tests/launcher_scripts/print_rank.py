"""Prints this rank's PMI_RANK/PMI_SIZE and its arguments."""
import os
import sys

print("rank %s of %s args %s" % (os.environ["PMI_RANK"], os.environ["PMI_SIZE"],
                                 " ".join(sys.argv[1:])))
print("to stderr from %s" % os.environ["PMI_RANK"], file=sys.stderr)
