"""mkdocs-gen-files: the pages made at build time (docs/docsite.py says what each holds) and the plots copied in."""
import sys
from pathlib import Path

import mkdocs_gen_files

sys.path.insert(0, str(Path(__file__).parent))
import facts  # noqa: E402
import docsite as pages  # noqa: E402

for module in pages.API:
    with mkdocs_gen_files.open(f"reference/{module}.md", "w") as f:
        f.write(pages.api_page(module))
with mkdocs_gen_files.open("reference/index.md", "w") as f:
    f.write("# API reference\n\nEvery public name, by module (`tests/test_docs_site.py` checks that each is here "
            "and documented).\n\n" + "\n".join(f"- [`{m}`]({m}.md): {line}" for m, line in pages.API.items()) + "\n")
for name in pages.optimizers():
    with mkdocs_gen_files.open(f"optimizers/{name}.md", "w") as f:
        f.write(pages.optimizer_page(name, facts.OPTIMIZERS))
with mkdocs_gen_files.open("optimizers/index.md", "w") as f:
    f.write(pages.optimizer_index(facts.OPTIMIZERS))
with mkdocs_gen_files.open("optimizers/options.md", "w") as f:
    f.write(pages.options_page())
with mkdocs_gen_files.open("optimizers/SUMMARY.md", "w") as f:  # (the site's nav of this section: literate-nav)
    f.write(pages.optimizer_nav())
with mkdocs_gen_files.open("hardware.md", "w") as f:
    f.write(pages.hardware_page())
for plot in sorted((pages.ROOT / "benchmarks").glob("*.[sp][vn]g")):
    with mkdocs_gen_files.open(f"assets/{plot.name}", "wb") as f:
        f.write(plot.read_bytes())
with mkdocs_gen_files.open("contributing.md", "w") as f:
    f.write((pages.ROOT / "CONTRIBUTING.md").read_text())
for doc in ("BENCHMARKS.md", "PERF_NOTES.md"):
    with mkdocs_gen_files.open(f"results/{doc}", "w") as f:
        f.write((pages.ROOT / doc).read_text().replace("](benchmarks/", "](../assets/"))
