//! Parse errors with a precise position.

/// A script syntax error: where it is and what is wrong.
///
/// Displays as `file:line:col: message` (lines and columns start at 1; a column counts
/// characters, a tab counts as one), the format editors and CI logs recognise.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{col}: {message}")]
pub struct ParseError {
    /// File name as given to the parser.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub col: u32,
    /// What is wrong.
    pub message: String,
}
