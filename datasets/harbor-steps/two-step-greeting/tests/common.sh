# Shared by every step's test.sh (the root tests/ is uploaded under each step's tests).
reward() {
  mkdir -p /logs/verifier
  if [ "$1" = "$2" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
}
