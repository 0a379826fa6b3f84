package prepare

// The prepared tree's layout (package prepared), as the tests look at it.
const (
	preparedDir = "prepared"
	stagingDir  = ".staging"
	locksDir    = ".locks"
	trashDir    = ".trash"
	recordName  = "artifact.json"
)
