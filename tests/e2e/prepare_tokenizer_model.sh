# data/prepare.py --tokenizer-model that is not a file: a directory (naming the model files in
# it), a FIFO (refused without being opened, so nothing blocks), a symbolic link loop, and a
# missing path each give one line naming the path, what it is and what the tokenizer expects,
# exit 1. Needs numpy, sentencepiece and tokenizers (skipped, exit 77, without them).
source "$(dirname "$0")/lib/common.bash"
cd "$WORK"
for m in numpy sentencepiece tokenizers; do
  if ! python3 -c "import $m" 2>/dev/null; then
    echo "SKIP: prepare_tokenizer_model: the Python module '$m' is needed (scripts/install_deps.sh)"
    exit 77
  fi
done
printf 'some text\n' >in.txt
mkdir t5 && touch t5/spiece.model t5/tokenizer.json
mkfifo fifo.model
ln -s loop.model loop.model
prep() { timeout 60 python3 "$SRC/data/prepare.py" --input in.txt --out out --tokenizer "$@"; }
expect_error 1 "tokenizer model t5 is a directory, not a file (--tokenizer sentencepiece expects a SentencePiece .model file; it holds t5/spiece.model: name that file)" -- \
  prep sentencepiece --tokenizer-model t5
expect_error 1 "tokenizer model t5 is a directory, not a file (--tokenizer hf expects a Hugging Face tokenizer.json file; it holds t5/tokenizer.json: name that file)" -- \
  prep hf --tokenizer-model t5
expect_error 1 "tokenizer model fifo.model is a FIFO, not a file (--tokenizer sentencepiece expects" -- \
  prep sentencepiece --tokenizer-model fifo.model
expect_error 1 "tokenizer model loop.model is a symbolic link loop, not a file" -- \
  prep hf --tokenizer-model loop.model
expect_error 1 "tokenizer model not found: none.model (--tokenizer sentencepiece expects a SentencePiece .model file)" -- \
  prep sentencepiece --tokenizer-model none.model
expect_error 1 "tokenizer model not found: t5/encoder.json (--tokenizer gpt2 expects a folder with encoder.json and vocab.bpe" -- \
  prep gpt2 --tokenizer-model t5
[ ! -e out ] || fail "a refused tokenizer left an output directory"
echo "prepare_tokenizer_model: ok"
