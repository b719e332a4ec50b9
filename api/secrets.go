package api

// PutSecretRequest is PUT /public/secrets/{name}: the value an account
// stores under that name. It is sealed at rest and never returned.
type PutSecretRequest struct {
	Value string `json:"value"`
}

// Secret is an account secret as the API shows it: never its value.
type Secret struct {
	Name      string `json:"name"`
	UpdatedAt string `json:"updated_at"`
}

// SecretList is GET /public/secrets.
type SecretList struct {
	Secrets []Secret `json:"secrets"`
}
