#!/bin/sh
set -eu
printf '#!/bin/sh\necho "hello, maka"\n' > /usr/local/bin/maka-greet
chmod 755 /usr/local/bin/maka-greet
