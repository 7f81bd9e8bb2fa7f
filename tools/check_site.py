#!/usr/bin/env python3
"""check_site.py HTML_DIR: every link and image of the site that stays inside it leads somewhere.

For each page, each href and src without a scheme must name a file of the site, and a #fragment
must be an id (or a name) in the page it leads to. Links out of the site (http, https, mailto)
are not followed: the tests have no network. Prints each broken link with its page; exit 1 if
there is one.
"""
import html.parser
import os
import sys
import urllib.parse


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k in ("id", "name") and v:
                self.ids.add(v)
            if v and ((k == "href" and tag in ("a", "link")) or (k == "src" and tag in ("img", "script"))):
                self.links.append(v)


def parse(path, cache={}):
    if path not in cache:
        p = Page()
        with open(path, encoding="utf-8") as f:
            p.feed(f.read())
        cache[path] = p
    return cache[path]


def main():
    root = os.path.abspath(sys.argv[1])
    broken, pages = [], 0
    for d, _, files in os.walk(root):
        for name in sorted(files):
            if not name.endswith(".html"):
                continue
            pages += 1
            page = os.path.join(d, name)
            for link in parse(page).links:
                u = urllib.parse.urlsplit(link)
                if u.scheme or u.netloc:
                    continue
                target = page if not u.path else os.path.normpath(
                    os.path.join(os.path.dirname(page), urllib.parse.unquote(u.path)))
                if os.path.isdir(target):
                    target = os.path.join(target, "index.html")
                rel = os.path.relpath(page, root)
                if not target.startswith(root + os.sep) or not os.path.isfile(target):
                    broken.append("%s: %s (no such file in the site)" % (rel, link))
                elif u.fragment and target.endswith(".html") and \
                        urllib.parse.unquote(u.fragment) not in parse(target).ids:
                    broken.append("%s: %s (no such anchor)" % (rel, link))
    for b in broken:
        print("check_site: broken link in " + b, file=sys.stderr)
    if broken:
        print("check_site: %d broken link(s) in %d pages" % (len(broken), pages), file=sys.stderr)
        return 1
    print("check_site: %d pages, every link inside the site leads to a page and anchor" % pages)
    return 0


if __name__ == "__main__":
    sys.exit(main())
