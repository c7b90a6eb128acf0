"""The command line of the repository checkers (check_layers.py, check_doc_paths.py): `SCRIPT [REPO]` checks REPO
(default: the scripts' repository) and exits non-zero listing what is wrong; `SCRIPT --self-test` runs the self-test.
"""
import pathlib
import sys


def main(check, self_test, failed, passed):
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    repo = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent
    errors = check(repo)
    for e in errors:
        print(e)
    if errors:
        sys.exit(failed.format(n=len(errors)))
    print(passed)
