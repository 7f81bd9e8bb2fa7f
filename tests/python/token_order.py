"""An independent reference of the concat loader's document order (docs/TOKENS.md, "the order of
the documents"), written from the rule, not from the library: the documents in blocks of 64
consecutive records; the blocks in the order of a Feistel permutation of (seed, 1); inside block
b the documents first + (sigma[t] ^ x_b) for t = 0..63, skipping those beyond the block, sigma the
Feistel permutation of [0, 64) of (seed, 2) and x_b = mix64(key(seed, 3) ^ b) % 64. The Feistel
network is the sampler's (four rounds of a keyed splitmix64 over the smallest even bit width
covering n, cycle-walked into [0, n))."""

M64 = (1 << 64) - 1
BLOCK = 64
KEY_TOKEN_DOCS = 0x544F4B454E44  # "TOKEND": the purpose word of the documents' order


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def key4(a, b, c, d):
    h = mix64(a ^ 0x6A09E667F3BCC909)
    h = mix64(h ^ b)
    h = mix64(h ^ c)
    return mix64(h ^ d)


class Feistel:
    def __init__(self, n, key):
        bits = 2
        while bits < 64 and (1 << bits) < n:
            bits += 1
        bits += bits & 1
        self.n, self.half = n, bits // 2
        self.mask = (1 << self.half) - 1
        self.keys = [mix64((key + i * 0x632BE59BD9B4E019) & M64) for i in range(4)]

    def __call__(self, i):
        if self.n <= 1:
            return 0
        x = i
        while True:
            lo, r = x >> self.half, x & self.mask
            for k in self.keys:
                lo, r = r, lo ^ (mix64(r ^ k) & self.mask)
            x = (lo << self.half) | r
            if x < self.n:
                return x


def doc_order(n_docs, seed, shuffle=True):
    """The documents' numbers in the order of the concatenation."""
    if not shuffle:
        return list(range(n_docs))
    nb = -(-n_docs // BLOCK)
    blocks = Feistel(nb, key4(KEY_TOKEN_DOCS, seed, 1, 0))
    sig = Feistel(BLOCK, key4(KEY_TOKEN_DOCS, seed, 2, 0))
    sigma = [sig(t) for t in range(BLOCK)]
    kx = key4(KEY_TOKEN_DOCS, seed, 3, 0)
    out = []
    for p in range(nb):
        b = blocks(p)
        first, m = b * BLOCK, min(BLOCK, n_docs - b * BLOCK)
        x = mix64(kx ^ b) % BLOCK
        out.extend(first + (s ^ x) for s in sigma if (s ^ x) < m)
    assert sorted(out) == list(range(n_docs))
    return out
