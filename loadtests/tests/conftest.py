"""Keep Locust from monkey-patching the test process with gevent: the sampler test needs real threads."""

import os

os.environ.setdefault("LOCUST_SKIP_MONKEY_PATCH", "1")
