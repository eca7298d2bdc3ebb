package pgstore

// DeclarationTickSQL exposes declarationTickSQL to TestDeclarationTickSQL.
const DeclarationTickSQL = declarationTickSQL
