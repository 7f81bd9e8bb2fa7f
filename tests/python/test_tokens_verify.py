"""TokenLoader(verify=): a bit flipped inside a document of a token store. The loader checks a
document's length and its last id, not its checksum, so without verify the flipped token is
read as another id and trained on; verify="first" or "always" (as the image Loader's) raises
CorruptError naming the store, the record and the field, for both packings, a mixture and the
caller's thread, and changes nothing on a clean store."""
import numpy as np
import pytest

from conftest import HAVE_LIB

pytestmark = pytest.mark.skipif(not HAVE_LIB, reason="no build")

torch = pytest.importorskip("torch")
import dlcache  # noqa: E402

EOS = 0
DOCS = [np.arange(1000 + 100 * i, 1000 + 100 * i + 50) for i in range(8)]


def write(path):
    dlcache.write_tokens(DOCS, path, eos_id=EOS, vocab_size=5000)
    return path


def flip(path, doc):
    """Flip one bit of token 3 of document @p doc, found by its bytes in the file."""
    raw = bytearray(path.read_bytes())
    at = raw.find(DOCS[doc][:8].astype(np.uint16).tobytes())
    assert at >= 0 and raw.find(DOCS[doc][:8].astype(np.uint16).tobytes(), at + 1) < 0
    raw[at + 6] ^= 1
    path.write_bytes(bytes(raw))


def epoch(ld):
    return [{k: v.clone() for k, v in b.items() if torch.is_tensor(v)} for b in ld]


@pytest.fixture
def stores(tmp_path):
    good = write(tmp_path / "good.dlc")
    bad = write(tmp_path / "flip.dlc")
    flip(bad, 5)
    return good, bad


def test_without_verify_the_flipped_token_is_read_silently(stores):
    good, bad = stores
    kw = dict(batch_size=2, seq_len=16, shuffle=False)
    with dlcache.Loader(str(good), **kw) as a, dlcache.Loader(str(bad), **kw) as b:
        x, y = epoch(a), epoch(b)
    diff = sum(int((p["input_ids"] != q["input_ids"]).sum()) for p, q in zip(x, y))
    assert diff == 1, "one token differs, and nothing said so: what verify= is for"


@pytest.mark.parametrize("mode", ["first", "always", True])
@pytest.mark.parametrize("packing", ["concat", "best_fit"])
@pytest.mark.parametrize("threads", [0, 2])
def test_verify_names_the_record(stores, mode, packing, threads):
    _, bad = stores
    with dlcache.Loader(str(bad), 2, seq_len=16, packing=packing, verify=mode,
                        threads=threads) as ld:
        with pytest.raises(dlcache.CorruptError,
                           match=r"flip\.dlc: record 5: field \"tokens\": checksum mismatch"):
            epoch(ld)


def test_verify_in_a_mixture(stores, tmp_path):
    _, bad = stores
    other = tmp_path / "other.dlc"
    dlcache.write_tokens([d + 2000 for d in DOCS], other, eos_id=EOS, vocab_size=5000)
    with dlcache.Loader([str(other), str(bad)], 2, seq_len=16, weights=[1, 1],
                        verify="first") as ld:
        with pytest.raises(dlcache.CorruptError, match=r"flip\.dlc: record 5: .*checksum"):
            for _ in range(3):
                epoch(ld)


@pytest.mark.parametrize("packing", ["concat", "best_fit"])
def test_verify_changes_nothing_on_a_clean_store(stores, packing):
    good, _ = stores
    kw = dict(batch_size=3, seq_len=16, seed=4, packing=packing)
    for mode in ("first", "always"):
        with dlcache.Loader(str(good), **kw) as a, \
                dlcache.Loader(str(good), verify=mode, **kw) as b:
            for _ in range(2):
                x, y = epoch(a), epoch(b)
                assert len(x) == len(y) > 0
                for p, q in zip(x, y):
                    assert p.keys() == q.keys()
                    for k in p:
                        assert torch.equal(p[k], q[k]), k


@pytest.mark.parametrize("bad", ["yes", 1, 2, None, "First"])
def test_verify_values_are_named(stores, bad):
    good, _ = stores
    with pytest.raises(ValueError, match="verify must be 'off', 'first' or 'always'"):
        dlcache.Loader(str(good), 2, seq_len=16, verify=bad)
