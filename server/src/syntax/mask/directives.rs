//! Lines and directives inside function bodies: the conditional groups open there (which
//! branch is kept, which directives are hidden) and a cursor over the text's lines.

/// One `#if` group inside a body: whether its current branch is the one kept.
struct Group {
    keeping: bool,
    /// A branch has been kept already (later `#elif`/`#else` branches are hidden).
    kept_one: bool,
}

/// The conditional groups open inside function bodies.
#[derive(Default)]
pub(super) struct Conditionals {
    groups: Vec<Group>,
    /// Nesting of conditional groups inside a hidden branch.
    hidden_nesting: usize,
}

impl Conditionals {
    /// Whether a group is open (the lines stand inside one).
    pub fn any_open(&self) -> bool {
        !self.groups.is_empty()
    }

    /// Whether the current line stands in a branch that is not kept.
    pub fn hiding(&self) -> bool {
        self.groups.iter().any(|g| !g.keeping)
    }

    /// Follows the directive `line` (trimmed, from its `#`) inside a body, `last` being
    /// the last significant byte of code before it: whether the directive is hidden.
    /// Conditional directives always are (a group's first branch is kept, or its
    /// `#else` after `#if 0`); others where they stand in a hidden branch or in the
    /// middle of a statement.
    pub fn hides_directive(&mut self, line: &str, last: u8) -> bool {
        let directive = line[1..].trim_start();
        let n = directive
            .bytes()
            .take_while(u8::is_ascii_alphabetic)
            .count();
        let (word, cond) = (&directive[..n], directive[n..].trim());
        let hiding = self.hiding();
        match word {
            "if" | "ifdef" | "ifndef" => {
                if hiding {
                    self.hidden_nesting += 1;
                } else {
                    let first = !(word == "if" && cond == "0");
                    self.groups.push(Group {
                        keeping: first,
                        kept_one: first,
                    });
                }
            }
            "elif" | "else" if self.hidden_nesting == 0 => {
                if let Some(g) = self.groups.last_mut() {
                    g.keeping = !g.kept_one;
                    g.kept_one = true;
                }
            }
            "endif" => {
                if self.hidden_nesting > 0 {
                    self.hidden_nesting -= 1;
                } else {
                    self.groups.pop();
                }
            }
            _ => return hiding || !matches!(last, b';' | b'{' | b'}' | b':'),
        }
        true
    }
}

/// The lines of a text, each with the byte offset where it starts.
pub(super) struct LineCursor<'t> {
    lines: std::str::SplitInclusive<'t, char>,
    /// Where the next line starts.
    pub offset: usize,
}

impl<'t> LineCursor<'t> {
    /// The cursor before the first line of `text`.
    pub fn new(text: &'t str) -> Self {
        LineCursor {
            lines: text.split_inclusive('\n'),
            offset: 0,
        }
    }

    /// The next line (its line break included) and where it starts.
    pub fn next_line(&mut self) -> Option<(usize, &'t str)> {
        let line = self.lines.next()?;
        let start = self.offset;
        self.offset += line.len();
        Some((start, line))
    }

    /// Passes over the lines that start before byte `end`.
    pub fn skip_to(&mut self, end: usize) {
        while self.offset < end && self.next_line().is_some() {}
    }

    /// The end of the directive whose first line, without its line break, is `body`
    /// at byte `start`: its continuation lines (after a line ending in `\`) are
    /// passed over with it.
    pub fn directive_end(&mut self, start: usize, body: &str) -> usize {
        let mut end = start + body.len();
        let mut cont = body.ends_with('\\');
        while cont {
            let Some((at, line)) = self.next_line() else {
                break;
            };
            let b = line.trim_end_matches(['\n', '\r']);
            end = at + b.len();
            cont = b.ends_with('\\');
        }
        end
    }
}
