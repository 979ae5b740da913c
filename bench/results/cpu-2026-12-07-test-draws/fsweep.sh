cd /work/main
f=0
for i in $(seq $1); do s=$(od -An -N4 -tu4 /dev/urandom | tr -d ' '); JATTN_TEST_SEED=$s JATTN_CLI=/tmp/fresh-b/build/tools/jattn timeout 300 /tmp/fresh-b/.venv/bin/python -m pytest -q -p no:cacheprovider python/tests/test_diffusers_models.py python/tests/test_diffusers_masks.py > /tmp/cz/fs-$s.txt 2>&1 || { f=$((f+1)); echo "FAIL seed $s"; grep -E "^FAILED|Error" /tmp/cz/fs-$s.txt | head -3; }; done
echo "fails $f / $1"
