"""The page of `emb serve` in a real browser: Debian's headless Chromium, driven through the
DevTools protocol (tests/cli/cdp.py), loads the page from the server, a word is typed into
the search box key by key and Enter pressed, and the test reads what the page shows: the
neighbours listed are gensim's most_similar, the map is drawn with points and labels (the
first rows by PCA, then the query's neighbourhood by t-SNE), an analogy typed into its form
gives gensim's answers. A screenshot of the page is saved in the build folder
(serve-page.png) for a person to look at."""
import os
import struct

import pytest
from gensim.models import KeyedVectors

from cdp import Browser
from conftest import BUILD_DIR, shared_path
from serve_util import Server


@pytest.fixture(scope="module")
def vec_path():
    return shared_path("fixtures", "gensim", "lee_fasttext.vec")


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", head[16:24])


def texts(b, selector):
    return b.js(f"[...document.querySelectorAll({selector!r})].map(e => e.dataset.word)")


def test_page_search_map_analogy(vec_path):
    kv = KeyedVectors.load_word2vec_format(vec_path)
    with Server(vec_path, "--threads", 2) as s, Browser(width=1360, height=900) as b:
        b.open(s.url)
        assert b.js("document.title") == "emb serve"
        # the header describes the table; the first map (PCA of the first 500 rows) is drawn
        b.wait_for("document.getElementById('info').textContent.includes('1,762 rows')",
                   what="the table's description")
        b.wait_for("+document.getElementById('map').dataset.points === 500", what="the first map")
        assert "PCA" in b.js("document.getElementById('map-status').textContent")
        assert int(b.js("document.getElementById('map').dataset.labels")) >= 50

        # type a word and press Enter
        b.click("#query")
        b.type("Arafat")
        assert b.js("document.getElementById('query').value") == "Arafat"
        b.press_enter()
        b.wait_for("document.querySelectorAll('#neighbours li').length === 15", what="neighbours")
        want = [w for w, _ in kv.most_similar("Arafat", topn=15)]
        assert texts(b, "#neighbours li") == want
        assert "15 nearest to “Arafat”" in b.js("document.getElementById('search-status').textContent")

        # the query's neighbourhood, by t-SNE
        b.js("document.getElementById('map-source').value = 'query';"
             "document.getElementById('map-method').value = 'tsne';"
             "document.getElementById('map-n').value = '150';")
        b.click("#map-form button[type=submit]")
        b.wait_for("document.getElementById('map-status').textContent.includes('t-SNE (perplexity')",
                   what="the t-SNE map")
        status = b.js("document.getElementById('map-status').textContent")
        assert "150 points" in status and "neighbourhood of “Arafat”" in status, status
        assert int(b.js("document.getElementById('map').dataset.labels")) >= 30

        # zoom in with the button: fewer points on screen, labels still drawn
        before = int(b.js("document.getElementById('map').dataset.labels"))
        b.click("#zoom-in")
        b.click("#zoom-in")
        assert b.js("map.k") > 2
        assert int(b.js("document.getElementById('map').dataset.labels")) > 0
        b.click("#zoom-reset")
        assert int(b.js("document.getElementById('map').dataset.labels")) == before

        # an analogy, typed
        for field, word in (("#analogy-a", "Israel"), ("#analogy-b", "Israeli"),
                            ("#analogy-c", "Palestinian")):
            b.click(field)
            b.type(word)
        b.press_enter()
        b.wait_for("document.querySelectorAll('#analogy-results li').length === 10", what="analogy")
        want = [w for w, _ in kv.most_similar(positive=["Israeli", "Palestinian"],
                                              negative=["Israel"], topn=10)]
        assert texts(b, "#analogy-results li") == want

        # an unknown word: the page says so
        b.js("document.getElementById('query').value = ''")
        b.click("#query")
        b.type("nosuchword")
        b.press_enter()
        b.wait_for("document.getElementById('search-status').classList.contains('error')",
                   what="the error")
        assert "not in the vocabulary" in b.js("document.getElementById('search-status').textContent")
        b.js("document.getElementById('query').value = 'Arafat'")
        b.press_enter()
        b.wait_for("document.getElementById('search-status').textContent.startsWith('15 nearest')",
                   what="the search again")

        shot = b.screenshot(os.path.join(BUILD_DIR, "serve-page.png"))
        w, h = png_size(shot)
        assert (w, h) == (1360, 900)
        assert os.path.getsize(shot) > 50000  # a drawn page, not a blank one


def test_page_of_a_table_without_words(tmp_path):
    import numpy as np
    w = np.random.default_rng(1).normal(size=(200, 8)).astype(np.float32)
    path = str(tmp_path / "ids.npy")
    np.save(path, w)
    with Server(path) as s, Browser(width=1100, height=800) as b:
        b.open(s.url)
        b.wait_for("document.getElementById('info').textContent.includes('row ids only')",
                   what="the table's description")
        b.wait_for("+document.getElementById('map').dataset.points === 200", what="the map")
        assert b.js("document.getElementById('query').placeholder") == "a row id"
        b.click("#query")
        b.type("17")
        b.press_enter()
        b.wait_for("document.querySelectorAll('#neighbours li').length === 15", what="neighbours")
        got = [int(x) for x in b.js("[...document.querySelectorAll('#neighbours li')].map(e => e.dataset.id)")]
        u = w / np.linalg.norm(w.astype(np.float64), axis=1, keepdims=True)
        cos = u @ u[17]
        cos[17] = -np.inf
        assert got == list(np.argsort(-cos)[:15])
