"""Prints this worker's rank and CUDA_VISIBLE_DEVICES."""
import os

print("worker %s of %s device %s" % (os.environ["PMI_RANK"], os.environ["PMI_SIZE"],
                                     os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")))
