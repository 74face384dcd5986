"""Tool-argument matchers by meaning (capsem/argmatch.py over capsem/shell_commands.py), pure.

Each row is a way an agent (or an attacker) may write the same command; the `rm -rf *` glob of
the policy's first version let every rewritten form through."""

from __future__ import annotations

import shlex

import pytest

from capsem.argmatch import ArgMatch, ArgPatternError, matcher
from capsem.shell_commands import commands

RM_RF = matcher({"shell": "rm -rf"})

RUNS_RM_RF = [
    "rm -rf /",
    "rm -r -f /",
    "rm -fr /",
    "rm -Rf /",  # rm documents -R as -r
    "rm -f -R /",
    "/bin/rm -rf /",
    "'rm' -rf /",
    '"rm" -rf /',
    "\\rm -rf /",
    "r''m -rf /",
    "$'rm' -rf /",
    "rm --recursive --force /",
    "rm --force -r /",
    "rm --rec --forc /",  # GNU getopt takes an unambiguous prefix
    "rm / -rf",  # GNU rm takes options after operands
    "rm\t-rf\t/",
    "rm   -rf\n",
    "sudo rm -rf /",
    "sudo -u root rm -rf /",
    "sudo -E --user=root -- rm -rf /",
    "doas -u root rm -rf /",
    "env A=1 rm -rf /",
    "env -i PATH=/bin rm -rf /",
    "env -S 'rm -rf' /",
    "A=1 B=2 rm -rf /",
    "nohup rm -rf / &",
    "timeout 5 rm -rf /",
    "timeout -s KILL -k 1 5s rm -rf /",
    "nice -n 5 rm -rf /",
    "nice -10 rm -rf /",
    "time -p rm -rf /",
    "command rm -rf /",
    "exec rm -rf /",
    "xargs rm -rf",
    "find . -print0 | xargs -0 -n 1 rm -rf",
    "xargs -I {} rm -rf {}",
    "find / -name x -exec rm -rf {} \\;",
    "busybox rm -rf /",
    "echo x; rm -rf /",
    "echo x && rm -rf /",
    "false || rm -rf /",
    "ls | rm -rf /",
    "sleep 1 & rm -rf /",
    "echo x\nrm -rf /",
    "echo x # a comment\nrm -rf /",
    "a && rm -Rf b",
    "(rm -rf /)",
    "{ rm -rf /; }",
    "if true; then rm -rf /; fi",
    "for f in *; do rm -rf $f; done",
    "! rm -rf /",
    "$(rm -rf /)",
    "echo $(rm -rf /)",
    'echo "$(rm -rf /)"',
    "echo `rm -rf /`",
    "cat <(rm -rf /)",
    "bash -c 'rm -rf /'",
    'sh -c "rm -rf /"',
    "zsh -c 'rm -rf /'",
    "bash -lc 'rm -rf /'",
    "bash -x -c 'rm -rf /'",
    "sudo bash -c \"sh -c 'rm -rf /'\"",
    "eval 'rm -rf /'",
    "echo 'rm -rf /' | sh",
    "printf 'rm -rf /' | bash",
    "bash <<< 'rm -rf /'",
    "{rm,-rf,/}",
    "rm -rf / > /dev/null 2>&1",
    "rm -rf '/",  # unbalanced quote: a shell refuses it, the matcher still reads it
    'rm -rf "/ && ls',
]

DOES_NOT_RUN_RM_RF = [
    "rm -r /",  # -f missing
    "rm -f x",
    "rm x",
    "echo rm -rf /",  # echo's arguments are text
    "echo 'rm -rf /'",
    "grep -rf pattern .",
    "git rm -rf x",  # git's subcommand, not the program rm
    "rmdir -rf",
    "ls -rf",
    "",
]


@pytest.mark.parametrize("line", RUNS_RM_RF)
def test_a_shell_pattern_matches_every_spelling_of_the_command(line):
    assert RM_RF.matches(line)


@pytest.mark.parametrize("line", DOES_NOT_RUN_RM_RF)
def test_a_shell_pattern_does_not_match_other_commands(line):
    assert not RM_RF.matches(line)


@pytest.mark.parametrize(
    "value",
    [
        ["rm", "-rf", "/"],  # argv: no shell reads it
        ["/bin/rm", "-r", "-f", "/"],
        ["sudo", "rm", "-fr", "/"],
        ["bash", "-c", "rm -rf /"],
        {"cmd": "rm -rf /"},
        {"steps": [{"run": "echo ok"}, {"run": "sudo rm -rf /"}]},
        ["rm -rf /", "ls"],  # a list of command lines (the first item has a space)
    ],
)
def test_a_shell_pattern_reads_argvs_and_nested_values(value):
    assert RM_RF.matches(value)


@pytest.mark.parametrize("value", [["echo", "rm -rf /"], {"a": ["rm", "-r", "x"]}, 3, None, True])
def test_a_shell_pattern_reads_argv_as_argv(value):
    assert not RM_RF.matches(value)


@pytest.mark.parametrize(
    ("pattern", "line", "expected"),
    [
        ("git push --force", "git push -f origin main", True),
        ("git push --force", "git -C repo push --force", True),
        ("git push -f", "git push origin main", False),
        ("git push -f", "git pull -f", False),
        ("chmod -R 777", "chmod --recursive 777 /", True),
        ("chmod -R", "chmod -r x", False),  # chmod's -R is not -r
        ("curl -k", "curl --insecure https://x", True),
        ("curl -X POST", "curl --request POST https://x", True),  # the value is a word after the flag
        ("find -delete", "find / -name x -delete", True),
        ("find -delete", "find / -name delete", False),
        ("r? -rf", "rm -rf /", True),  # the program is a glob
        ("*sh", "bash -c ls", True),
        ("rm", "RM -x", True),  # a program's name in any case (case-insensitive file systems)
        ("rm -rf /", "rm -rf /tmp", False),  # the pattern's words must be there
        ("rm -rf /*", "rm -rf /tmp", True),  # ... each a glob
    ],
)
def test_shell_patterns_by_program(pattern, line, expected):
    assert matcher({"shell": pattern}).matches(line) is expected


def test_any_matches_a_string_at_any_depth():
    metadata = matcher({"any": "*169.254.169.254*"})
    assert metadata.matches({"request": {"urls": ["https://ok", "http://169.254.169.254/latest"]}})
    assert metadata.matches("curl http://169.254.169.254/")
    assert not metadata.matches({"request": {"urls": ["https://ok"], "port": 169}})


def test_globs_and_regexes_keep_their_meaning_and_read_an_argv():
    assert matcher("rm -rf *").matches("rm -rf /")
    assert not matcher("rm -rf *").matches("sudo rm -rf /")  # a glob is the text as written
    assert matcher("rm -rf *").matches(["rm", "-rf", "/"])  # an argv's words joined
    assert matcher("*rm -rf*").matches({"cmd": "rm -rf /"})  # anything else: its JSON
    assert matcher({"regex": "^/etc/"}).matches("/etc/passwd")
    assert not matcher({"regex": "^/etc/"}).matches("/home/etc/")


def test_argument_names_may_be_globs():
    anywhere = ArgMatch.of("*", {"shell": "rm -rf"})
    assert anywhere.matches({"script": "ls", "cleanup": "rm -rf /"})
    assert not anywhere.matches({"script": "ls"})
    assert ArgMatch.of("command", {"shell": "rm -rf"}).matches({"command": ["rm", "-rf", "/"]})
    assert not ArgMatch.of("command", {"shell": "rm -rf"}).matches({"other": "rm -rf /"})
    assert not ArgMatch.of("command", "x").matches(None)


@pytest.mark.parametrize(
    ("spec", "where", "message"),
    [
        (3, "", "must be a glob (text), {regex: ...}, {shell: ...} or {any: ...}"),
        ({"glob": "x"}, "", "must be a glob (text), {regex: ...}, {shell: ...} or {any: ...}"),
        ({"shell": ""}, ".shell", "must be a command line (text)"),
        ({"shell": "-rf"}, ".shell", "must start with a program (e.g. 'rm -rf')"),
        ({"shell": "rm 'x"}, ".shell", "is not a command line (No closing quotation)"),
        ({"regex": "("}, ".regex", "is not a valid regular expression"),
    ],
)
def test_bad_patterns_say_what_is_wrong(spec, where, message):
    with pytest.raises(ArgPatternError) as bad:
        matcher(spec)
    assert bad.value.where == where and str(bad.value).startswith(message)


def test_the_commands_of_a_line_with_wrappers():
    line = "sudo -u root env A=1 bash -c 'echo x; /bin/rm -r -f /'"
    assert [(c.program, c.args) for c in commands(line)] == [
        ("sudo", ("-u", "root", "env", "A=1", "bash", "-c", "echo x; /bin/rm -r -f /")),
        ("env", ("A=1", "bash", "-c", "echo x; /bin/rm -r -f /")),
        ("bash", ("-c", "echo x; /bin/rm -r -f /")),
        ("echo", ("x",)),
        ("rm", ("-r", "-f", "/")),
    ]


def test_nesting_is_followed_and_bounded():
    line = "rm -rf /"
    for _ in range(6):
        line = f"sh -c {shlex.quote(line)}"
    assert RM_RF.matches(line)
    assert not RM_RF.matches("$(" * 5000 + "ls")  # deeper than read: no error, no endless work
    assert RM_RF.matches({"a": [[[[[[["rm -rf /"]]]]]]]})
