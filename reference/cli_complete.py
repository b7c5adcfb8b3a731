"""`minborg completion bash|zsh|fish`: the shell completion scripts, printed without importing typer.

Each script is the one typer writes for `minborg` (a unit test holds them equal): the shell
calls `minborg` back with _MINBORG_COMPLETE set, and the full command line answers with the
commands, options and arguments that fit what was typed. Install with, e.g.,
`minborg completion bash > ~/.local/share/bash-completion/completions/minborg`,
`minborg completion zsh > "${fpath[1]}/_minborg"` or
`minborg completion fish > ~/.config/fish/completions/minborg.fish`.
"""

from __future__ import annotations

COMPLETE_VAR = "_MINBORG_COMPLETE"
SCRIPTS = {
    'bash': '_minborg_completion() {\n    local IFS=$\'\n\'\n    COMPREPLY=( $( env COMP_WORDS="${COMP_WORDS[*]}" \\\n                   COMP_CWORD=$COMP_CWORD \\\n                   _MINBORG_COMPLETE=complete_bash $1 ) )\n    return 0\n}\n\ncomplete -o default -F _minborg_completion minborg',
    'zsh': '#compdef minborg\n\n_minborg_completion() {\n  eval $(env _TYPER_COMPLETE_ARGS="${words[1,$CURRENT]}" _MINBORG_COMPLETE=complete_zsh minborg)\n}\n\ncompdef _minborg_completion minborg',
    'fish': 'complete --command minborg --no-files --arguments "(env _MINBORG_COMPLETE=complete_fish _TYPER_COMPLETE_FISH_ACTION=get-args _TYPER_COMPLETE_ARGS=(commandline -cp) minborg)" --condition "env _MINBORG_COMPLETE=complete_fish _TYPER_COMPLETE_FISH_ACTION=is-args _TYPER_COMPLETE_ARGS=(commandline -cp) minborg"',
}


def script(shell: str) -> str:
    """The completion script of `shell` (bash, zsh or fish)."""
    return SCRIPTS[shell]
